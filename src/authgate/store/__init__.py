"""The database: the only package that imports SQLAlchemy. Engine, migrations, one store
per table family."""

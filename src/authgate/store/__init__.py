"""The database: the only package that imports SQLAlchemy, and the one that chooses the SQL
dialect. `db` (engine, transactions, migrations), one store per table family (`users`,
`sessions` with `rotation`, `one_time`, `limits`), `purge`, `sweep`, and `errors` (what the
edges need to map driver errors)."""

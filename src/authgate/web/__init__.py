"""The HTTP edge: the only package (with app.py and cli/) that imports FastAPI or Starlette."""

"""Persistence through SQLAlchemy async: SQLite by default, PostgreSQL with the same code."""

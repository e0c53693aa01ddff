"""SQL: profile facts, API keys and their migrations through SQLAlchemy (PostgreSQL,
SQLite), and typed agent state in a SQLite file."""

"""Pure decisions and types. Imports no I/O library (enforced by .importlinter)."""

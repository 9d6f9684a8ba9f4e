"""External configuration schemas (pydantic, camelCase): validated here, then turned into
the frozen internal configs of ``preheat.core``."""

"""Routing plugins: filters and scorers (predicted ms), one module each, registered by name
in :mod:`preheat.core.routing.plugins.registry`."""

"""Run records and the report: what `preheat load`, `preheat up` and `preheat simulate` write,
and what `preheat report` reads."""

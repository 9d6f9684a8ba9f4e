"""Routing: which endpoint serves a request, as a pure function of a snapshot.

``types`` holds the snapshot and decision values; ``scheduler`` runs filters, scorers (in
predicted milliseconds) and one picker; ``plugins/`` holds each plugin with its formula.
"""

"""Retrieval evaluation's library: BEIR folders, passage text, exact top-k search."""

"""Batch mode: requests sent through a provider's Batch API (OpenAI's Files and Batches endpoints), not one by one.

``lines`` writes and reads the JSONL lines, ``ledger`` records every upload and batch the
moment the provider returns its id, ``client`` talks to the Files and Batches endpoints,
and ``runner`` plans, submits, polls and collects. None of it imports Beam; the stage that
uses it is ``transforms.batch_calls``.
"""

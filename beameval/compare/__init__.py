"""Beam-free logic for comparing two runs and gating a release on the difference.

* :mod:`~beameval.compare.paired`: :class:`PairedSums`, the mergeable per-score accumulator of paired rows.
* :mod:`~beameval.compare.interval`: the paired Student-t interval on per-row differences.
* :mod:`~beameval.compare.significance`: the exact McNemar test and the paired t-test.
* :mod:`~beameval.compare.power`: the minimum detectable effect and the rows needed to decide.
* :mod:`~beameval.compare.holm`: Holm's step-down correction of a family of p-values.
* :mod:`~beameval.compare.policy`: the gate policy file (``--policy GATE.yaml``).
* :mod:`~beameval.compare.verdict`: GO / NO-GO / INCONCLUSIVE, per score and overall.
* :mod:`~beameval.compare.gate`: per-score records and verdicts from paired sums (overall, per group) and the policy.
* :mod:`~beameval.compare.pairing`: join keys, their hash buckets, and :class:`PairTally`, the comparison's counts.
* :mod:`~beameval.compare.join`: joining one hash bucket of both runs by key in Arrow: pairs, sums, flips.
* :mod:`~beameval.compare.messages`: the one-paragraph verdict messages a scheduler logs.
* :mod:`~beameval.compare.identity`: what makes two runs comparable: the dataset fingerprint and hashes.
* :mod:`~beameval.compare.runs`: run-history records and the ``latest`` baseline rule.
* :mod:`~beameval.compare.sequential`: ``--decide``'s anytime-valid confidence sequence and wave verdict.
* :mod:`~beameval.compare.wave_order`: ``--decide``'s seeded evaluation order and its waves.

Nothing here imports apache_beam: the Beam job (``transforms/pair.py``) only delegates.
"""

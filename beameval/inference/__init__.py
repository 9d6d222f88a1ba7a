"""Resilient async inference against model and agent endpoints, free of Beam so it is testable and reusable alone.

Import the modules themselves (``beameval.inference.engine``, ``.classify``, ...): this
package re-exports nothing, so an offline run that only needs the request key
(``beameval.cache.key`` -> ``.prepared``) does not load aiohttp and redis at start-up.
"""

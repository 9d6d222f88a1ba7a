"""The evaluator's driver: configuration, options, the Beam graph and the ``pipeline.run`` entry point."""

import logging

# Beam logs this on import whenever the optional [gcp] extra is absent; it is noise for users.
logging.getLogger().addFilter(lambda record: "apitools not found" not in record.getMessage())

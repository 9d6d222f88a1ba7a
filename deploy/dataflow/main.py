"""The Flex Template's entry point: ``python -m pipeline.run`` with the launcher's arguments.

The launcher runs ``FLEX_TEMPLATE_PYTHON_PY_FILE`` as a script, so this file sits beside
(not inside) the ``pipeline`` package; the template's parameters arrive as
``--name=value`` flags, plus the launcher's own Dataflow options (``--project``,
``--region``, ``--temp_location``, ``--job_name``, ...), which Beam reads.
"""

import sys

from pipeline.run import main

if __name__ == "__main__":
    sys.exit(main())

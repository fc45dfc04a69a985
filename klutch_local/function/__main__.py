"""``python -m klutch_local.function``: serve function-klutch-local (server.main)."""

from klutch_local.function.server import main

main()

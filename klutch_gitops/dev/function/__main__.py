"""``python -m klutch_gitops.dev.function``: serve function-klutch-local (server.main)."""

from klutch_gitops.dev.function.server import main

main()

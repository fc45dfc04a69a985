"""The real GitOps tools the reconciler runs beside, for the peers tests and the benchmark."""

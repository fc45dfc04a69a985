"""Control Plane controllers of the Klutch bind protocol that the leading reconciler runs."""

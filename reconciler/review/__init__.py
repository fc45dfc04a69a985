"""Pull-request review: plan a change against the clusters and post it to the forge."""

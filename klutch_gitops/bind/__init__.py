"""The klutch-bind command line and its client of the bind API."""

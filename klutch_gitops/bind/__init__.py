"""The klutch-bind command line: its OIDC logins and token cache, its client of the bind API, and
the App Cluster's side of a binding."""

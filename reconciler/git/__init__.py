"""Git access for the reconciler: a private working clone, status commits, pushes that never force.

Every call runs the real ``git`` through GitPython (``runner``), with a timeout and without a
terminal. Secrets stay out of argv, URLs, config files and messages: an https token reaches git
through an askpass helper that reads it from the child's environment, an ssh key through
``GIT_SSH_COMMAND`` (``credentials``).

A URL, branch or ref reaches git's argv only once checked (``klutch_gitops.urls``), behind ``--``
or as an option's ``=value``; git may use the registration's own transport only
(``GIT_ALLOW_PROTOCOL``, so no ``ext::``, ``file://`` or redirect to another transport), and ssh
runs with nothing from outside the registration: no ssh config file, agent or default key, host
keys only from the registration's own known_hosts (or the machine's global one), never learned on
first use into a file that every tenant shares.

Modules: ``checkout`` (the reconciler's clone of one branch), ``remote`` (a poll without a clone),
``local`` (reading an existing repository, for ``klutch-gitops plan``).
"""

"""``python -m tools.release.image``: the image of both services, built without a Docker daemon.

mmdebstrap makes a Debian slim root filesystem (cached), ``install.sh`` (beside this module)
installs the project's wheels into it under chroot, and the result is written as an OCI image
layout that ``skopeo``, ``crane`` or ``oras`` push and kind loads; the root ``Dockerfile`` makes
the same image where Docker runs.
"""

"""Release tooling: the wheels, sdists and krew archive (``dist``) and the image (``image``)."""

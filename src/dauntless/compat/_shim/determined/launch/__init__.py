"""``determined.launch``: Dauntless's launch layers (:mod:`dauntless.launch`)."""

"""Tasks: what a run trains for and how it is evaluated (classification, spoofing...)."""

"""Object detection (the United Perception world): COCO evaluation, the detection task."""

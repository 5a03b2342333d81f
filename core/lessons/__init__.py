"""Lessons shipped with the package (JSON files; the format is described in core/lesson.py)."""

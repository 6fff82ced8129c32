"""Converters from the released checkpoint layouts to the project layout."""

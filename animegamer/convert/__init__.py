"""Converters from the released checkpoint layouts to the project layout: the command line
(`__main__`) and `from_registry.convert_registry_character`, a registry character's release
downloaded, converted and published."""

"""The project as a whole: the command line, packaging, layout, version, and the promises of
the README and the docs/ pages.
"""

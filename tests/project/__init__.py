"""The project as a whole: the command line, packaging, layout, version, and the README's promises.
"""

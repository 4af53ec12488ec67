"""kachedb-radix explain: recording, views, profiles, and the page in a real browser."""

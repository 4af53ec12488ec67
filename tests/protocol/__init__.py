"""The JSON-lines stdio protocol: the client, the server and hostile programs."""

"""Reference implementations the production decoders are checked against, value for value."""

"""The examples need nothing but the plugin: the server comes from --sglang-url."""

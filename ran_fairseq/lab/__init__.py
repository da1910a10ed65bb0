"""The lab beside the plugin: benchmark and reproduction tooling that runs fairseq as a user would.

Nothing in the plugin (what ``--user-dir ran_fairseq`` imports) imports this package.
"""

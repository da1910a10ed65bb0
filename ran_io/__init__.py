"""What the plugin (``ran_fairseq``) and the lab (``ran_lab``) share, importing neither torch nor
fairseq: ``textio`` (files written whole or not at all, text read strictly, locks, one-line file
errors) and ``tied`` (child processes that end with the process that started them)."""

"""The ``ter`` scorer for ``fairseq-generate --scoring ter`` (registered when the plugin is
imported). Scoring detokenized output with sacreBLEU is ``ran_text.evaluate`` (``ran-evaluate``)."""

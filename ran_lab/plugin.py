"""The plugin as the lab runs it, in every process of its own that builds or loads a model: with
every fix of ``ran_fairseq.fixes.FIXES``, the opt-in ones too (processes it starts inherit
``RAN_FAIRSEQ_FIXES=all`` unless the environment names other fixes), and without the noise that
importing fairseq prints (``quiet``)."""
import os

from ran_lab import quiet


def load():
    """Import and register the plugin, make its fixes, keep the program's logging; the plugin."""
    os.environ.setdefault("RAN_FAIRSEQ_FIXES", "all")
    quiet.install()
    with quiet.library_logging():
        import ran_fairseq
        from ran_fairseq import fixes
    fixes.apply()  # the plugin may have been imported before the variable was set
    return ran_fairseq

"""fairseq's own tests with and without the plugin (ran_lab/upstream.py): the summary of the two
runs counts each run's outcomes and names the tests whose outcome differs."""
from ran_lab.upstream import summary


def test_the_summary_counts_outcomes_and_names_the_tests_that_differ():
    plain = {"outcomes": {"a": "passed", "b": "failed", "c": "passed", "d": "skipped"}}
    plugin = {"outcomes": {"a": "passed", "b": "passed", "d": "skipped", "e": "error"}}
    assert summary(plain, plugin) == {
        "tests": 5, "without_plugin": {"failed": 1, "passed": 2, "skipped": 1},
        "with_plugin": {"error": 1, "passed": 2, "skipped": 1},
        "differ": {"b": ["failed", "passed"], "c": ["passed", "absent"],
                   "e": ["absent", "error"]}}

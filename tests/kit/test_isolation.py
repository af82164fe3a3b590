"""The fork-and-wait runner every gate evaluation goes through, with real child processes."""

import os
import time

from repro.isolation import run_isolated


def square(x):
    print(f"working on {x}")
    return x * x


def boom(_):
    raise RuntimeError("vLLM said no")


def hang(_):
    time.sleep(600)


def die(_):
    os._exit(7)


def test_answers_come_back_in_order_with_the_childs_output():
    outcomes = run_isolated(square, [3, 1, 2], timeout=60, jobs=2)
    assert [o.value for o in outcomes] == [9, 1, 4]
    assert all(o.ok for o in outcomes)
    assert "working on 3" in outcomes[0].log


def test_an_exception_is_a_result_with_its_traceback():
    (outcome,) = run_isolated(boom, [None], timeout=60)
    assert outcome.status == "error"
    assert "RuntimeError: vLLM said no" in outcome.detail


def test_a_hanging_child_is_killed_and_recorded_as_timeout():
    (outcome,) = run_isolated(hang, [None], timeout=1)
    assert outcome.status == "timeout"
    assert "killed after 1 s" in outcome.detail


def test_a_child_that_dies_silently_is_reported():
    (outcome,) = run_isolated(die, [None], timeout=60)
    assert outcome.status == "died"
    assert "status 7" in outcome.detail

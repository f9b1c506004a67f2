"""Misuse is reported clearly: capabilities, inputs, loops, scopes and failing logic, at 1, 2
and 3 workers.

Errors that operators catch are checked on every worker. An error that escapes a worker
stops every worker and comes out of the ``run`` fixture as ``st.WorkerError``, whose message
names the original exception (its type, and for failing logic the operator) and whose
``index`` says which worker failed.
"""
import re

import pytest

import sparktimely as st
from sparktimely import Product
from sparktimely.testing import consolidate
from matrix_helpers import example, merged, per_worker


def capture_errors_in_source(run, action):
    """Runs ``action(cap, output)`` inside a source's logic on every worker; returns the
    exception each worker's source raised."""
    errors = per_worker(run.workers)

    def build(scope):
        def ctor(cap, info):
            def logic(output):
                try:
                    action(cap, output)
                except Exception as error:         # noqa: BLE001 - inspected by the test
                    errors[scope.index].append(error)
                if cap._live:
                    cap.drop()
            return logic
        return st.source(scope, "Src", ctor).capture()
    example(run, build)
    assert [len(mine) for mine in errors] == [1] * run.workers
    return [error for (error,) in errors]


# -- capabilities -----------------------------------------------------------------------------

def test_downgrade_backwards_names_both_times(run):
    def action(cap, output):
        cap.downgrade(7)
        cap.downgrade(3)
    for error in capture_errors_in_source(run, action):
        assert isinstance(error, st.CapabilityError)
        assert "7" in str(error) and "3" in str(error)


def test_a_capability_set_names_the_call_that_asked_for_a_time_it_does_not_allow(run):
    """downgrade told the same words as delayed, not which call failed."""
    def action(cap, output):
        held, told = st.CapabilitySet([cap.delayed(3)]), []
        for ask in (lambda: held.downgrade([1]), lambda: held.delayed(2)):
            try:
                ask()
            except st.CapabilityError as error:
                told.append(str(error))
        held.drop()
        raise st.CapabilityError(" | ".join(told))
    for error in capture_errors_in_source(run, action):
        assert str(error).split(" | ") == [
            "CapabilitySet.downgrade([1]): no capability in the set allows time 1: it holds [3]",
            "CapabilitySet.delayed(2): no capability in the set allows time 2: it holds [3]"]


def test_a_capability_set_given_a_time_of_another_type_names_the_call_and_the_type(run):
    """The set compared the times itself and told only 'times of two types'."""
    def action(cap, output):
        held, told = st.CapabilitySet([cap.delayed(3)]), []
        for ask in (lambda: held.downgrade([st.Product(0, 1)]),
                    lambda: held.delayed(st.Product(0, 1))):
            try:
                ask()
            except TypeError as error:
                told.append(str(error))
        held.drop()
        raise st.CapabilityError(" | ".join(told))
    for error in capture_errors_in_source(run, action):
        assert str(error).split(" | ") == [
            "CapabilitySet.downgrade([Product(0, 1)]): time Product(0, 1) is not of this "
            "scope's type (like 0)",
            "CapabilitySet.delayed(Product(0, 1)): time Product(0, 1) is not of this scope's "
            "type (like 0)"]


def test_downgrade_backwards_in_constructor_raises_at_build(run):
    def build(scope):
        def ctor(cap, info):
            cap.downgrade(12)
            cap.downgrade(4)
            return lambda output: None
        st.source(scope, "Src", ctor)
    with pytest.raises(st.WorkerError, match="CapabilityError") as info:
        example(run, build)
    assert "12" in str(info.value) and "4" in str(info.value)


def test_delayed_backwards_names_both_times(run):
    def action(cap, output):
        later = cap.delayed(9)
        try:
            later.delayed(2)
        finally:
            later.drop()
    for error in capture_errors_in_source(run, action):
        assert isinstance(error, st.CapabilityError)
        assert "9" in str(error) and "2" in str(error)


def test_input_capability_delayed_backwards(run):
    def job(worker):
        errors = []

        def ctor(cap, info):
            cap.drop()

            def logic(input, output):
                for cap, batch in input:
                    try:
                        cap.delayed(cap.time - 1)
                    except st.CapabilityError as error:
                        errors.append(str(error))
            return logic
        handle = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(handle).unary(st.Pipeline, "U", ctor))
        handle.advance_to(5)
        handle.send("x")
        handle.close()
        worker.run()
        return errors
    for errors in run(job):
        assert len(errors) == 1
        assert "5" in errors[0] and "4" in errors[0]


def test_a_capability_of_another_output_names_the_output_and_how_to_get_one(run):
    """cap.delayed(t) is for output 0 (timely's): giving with it on output 1 told only that
    the capability 'belongs to another output'."""
    def job(worker):
        told = []

        def build(scope):
            builder = st.OperatorBuilder("TwoOut", scope)
            input = builder.new_input(scope.to_stream(["x"]), st.Pipeline)
            builder.new_output()
            second, stream = builder.new_output()

            def ctor(capabilities):
                for capability in capabilities:
                    capability.drop()

                def logic(frontiers):
                    for cap, batch in input:
                        try:
                            second.session(cap.delayed(1)).give_batch(batch)
                        except st.CapabilityError as error:
                            told.append(str(error))
                        second.session(cap.delayed_for_output(1, 1)).give_batch(batch)
                return logic
            builder.build(ctor)
            return stream.capture()
        captured = worker.dataflow(build)
        worker.run()
        return told, captured.extract()
    for told, captured in run(job):
        assert told == ["capability for time 1 belongs to another output: a session on "
                        "output 1 needs a capability of output 1 (delayed_for_output(t, 1) "
                        "or retain_for_output(1) of an input capability, or the "
                        "constructor's capability for it)"]
        assert captured == [(1, ["x"])]


@pytest.mark.parametrize("output", ["1", True, 1.0, None])
@pytest.mark.parametrize("call", ["delayed_for_output", "retain_for_output"])
def test_an_output_that_is_no_index_names_the_call_and_the_value(call, output):
    """'1' failed inside Python's comparison ('<=' not supported), 1.0 as a list index, and
    True passed for output 1: none named the argument. (An argument check: one worker.)"""
    told = []

    def ctor(cap, info):
        cap.drop()

        def logic(input, output_handle):
            for cap, batch in input:
                try:
                    if call == "delayed_for_output":
                        cap.delayed_for_output(cap.time, output)
                    else:
                        cap.retain_for_output(output)
                except TypeError as error:
                    told.append(str(error))
        return logic
    st.example(lambda scope: scope.to_stream("a").unary(st.Pipeline, "Later", ctor).probe())
    assert told == [f"{call}: output must be an int (an output index), got {output!r} "
                    f"({type(output).__name__})"]


@pytest.mark.parametrize("use", ["session", "delayed", "downgrade", "time", "give_at"])
def test_capability_used_after_drop(run, use):
    def action(cap, output):
        cap.drop()
        if use == "session":
            output.session(cap).give(1)
        elif use == "delayed":
            cap.delayed(3)
        elif use == "downgrade":
            cap.downgrade(3)
        elif use == "time":
            cap.time
        else:
            output.give_at(cap, [1])
    for error in capture_errors_in_source(run, action):
        assert isinstance(error, st.CapabilityError)
        assert "dropped" in str(error)


@pytest.mark.parametrize("use", ["session", "give_at", "delayed", "retain"])
def test_input_capability_kept_past_its_logic_is_refused(run, use):
    # An InputCapability stands for its batch while the logic that received it runs; kept
    # for a later run, its time may be complete (here: the frontier has passed 5).
    def job(worker):
        errors = []

        def build(scope):
            kept = []

            def ctor(cap, info):
                cap.drop()
                activate = scope.activator_for(info.address).activate

                def logic(input, output):
                    for in_cap, batch in input:
                        output.session(in_cap).give_batch(batch)
                        if in_cap.time == 0:
                            kept.append(in_cap)
                    if kept and not input.frontier.less_equal(5) and not errors:
                        stale = kept[0]
                        try:
                            if use == "session":
                                output.session(stale).give("stale")
                            elif use == "give_at":
                                output.give_at(stale, ["stale"])
                            elif use == "delayed":
                                stale.delayed(7)
                            else:
                                stale.retain()
                        except st.CapabilityError as error:
                            errors.append(str(error))
                    elif kept and not errors:
                        activate()
                return logic
            return scope.to_stream([0, 5, 9]).delay(lambda x, t: x).unary_frontier(
                st.Pipeline, "KeepsInputCapability", ctor).capture()
        captured = worker.dataflow(build)
        worker.run()
        return errors, captured.extract()
    results = run(job)
    action = {"session": "send with", "give_at": "send with", "delayed": "delay",
              "retain": "retain"}[use]
    for errors, _ in results:
        assert errors == [f"cannot {action} the input capability for time 0: its batch was "
                          f"received in an earlier run of the operator's logic, and the time "
                          f"may be complete since; retain() it while the batch is processed "
                          f"to keep it"]
    assert consolidate([c for _, c in results]) == [
        (t, [t] * run.workers) for t in (0, 5, 9)]


@pytest.mark.parametrize("notificator", ["FrontierNotificator", "unary_notify's"])
def test_notify_at_an_input_capability_asks_for_a_retained_one(run, notificator):
    # An input capability holds no time after its batch: a notification for it would come
    # when the time is complete, too late to send at it.
    def build(scope):
        if notificator == "unary_notify's":
            def logic(input, output, notifications):
                for cap, _ in input:
                    notifications.notify_at(cap)
            scope.to_stream([1]).unary_notify(st.Pipeline, "Notified", [], logic)
            return

        def ctor(cap, info):
            cap.drop()
            requests = st.FrontierNotificator()

            def logic(input, output):
                for in_cap, _ in input:
                    requests.notify_at(in_cap)
            return logic
        scope.to_stream([1]).unary_frontier(st.Pipeline, "Notified", ctor)
    with pytest.raises(st.WorkerError, match="'Notified'.*CapabilityError: notify_at needs a "
                                             "Capability.*retain\\(\\) the input capability"):
        example(run, build)


def test_session_kept_past_its_logic_is_refused_losing_nothing_given_before(run):
    # A session is flushed when the logic that opened it returns; records given to it later
    # used to wait in its buffer forever.
    def job(worker):
        errors = []

        def build(scope):
            def ctor(cap, info):
                activate = scope.activator_for(info.address).activate
                session = []

                def logic(output):
                    if not session:
                        session.append(output.session(cap))
                        session[0].give("first")
                        activate()
                        return
                    for give in (lambda s: s.give("later"), lambda s: s.give_batch(["b"]),
                                 lambda s: s.give_iterator(["i"]),
                                 lambda s: s.give_iterator_later(["l"])):
                        try:
                            give(session[0])
                        except st.CapabilityError as error:
                            errors.append(str(error))
                    cap.drop()
                return logic
            return st.source(scope, "KeepsSession", ctor).capture()
        captured = worker.dataflow(build)
        worker.run()
        return errors, captured.extract()
    results = run(job)
    for errors, _ in results:
        assert len(errors) == 4 and all("output.session(capability)" in e for e in errors)
    assert consolidate([c for _, c in results]) == [(0, ["first"] * run.workers)]


@pytest.mark.parametrize("use", ["delayed", "downgrade", "try_delayed", "try_downgrade"])
def test_a_capability_moved_to_a_time_of_another_type_names_it(run, use):
    def action(cap, output):
        getattr(cap, use)(Product(0, 1))
    for error in capture_errors_in_source(run, action):
        assert isinstance(error, TypeError)
        assert "Product(0, 1) is not of this scope's type (like 0)" in str(error)


@pytest.mark.parametrize("where", ["input capability", "delay in a loop"])
def test_a_time_of_another_type_from_a_batch_names_it_and_the_operator(run, where):
    def build(scope):
        if where == "delay in a loop":
            def body(inner):
                inner.to_stream([1]).delay(lambda x, t: x).probe()
            scope.iterative(body)
            return

        def ctor(cap, info):
            cap.drop()

            def logic(input, output):
                for in_cap, batch in input:
                    output.session(in_cap.delayed(Product(1, 1))).give_batch(batch)
            return logic
        scope.to_stream([1]).unary(st.Pipeline, "Restamp", ctor)
    with pytest.raises(st.WorkerError) as info:
        example(run, build)
    message = str(info.value)
    expected = ("'Delay'", "time 1 is not of this scope's type (like Product(0, 0))") \
        if where == "delay in a loop" else \
        ("'Restamp'", "time Product(1, 1) is not of this scope's type (like 0)")
    assert all(part in message for part in expected), message


@pytest.mark.parametrize("fault", ["capability", "notification time", "own"])
def test_an_error_in_an_operator_constructor_names_the_operator(run, fault):
    def build(scope):
        if fault == "notification time":
            def body(inner):
                inner.to_stream([]).unary_notify(st.Pipeline, "Wakes", [3],
                                                 lambda i, o, n: None)
            scope.iterative(body)
            return

        def ctor(cap, info):
            if fault == "capability":
                cap.delayed(5).delayed(3)
            raise KeyError("no such column")
        st.source(scope, "Built", ctor)
    with pytest.raises(st.WorkerError) as info:
        example(run, build)
    message = str(info.value)
    expected = {"capability": ("'Built'", "while it was built",
                               "cannot delay capability at time 5 to 3"),
                "notification time": ("'Wakes'", "while it was built",
                                      "time 3 is not of this scope's type"),
                "own": ("'Built'", "while it was built", "KeyError: 'no such column'")}[fault]
    assert all(part in message for part in expected), message


@pytest.mark.parametrize("fault", ["never built", "int summary in a loop", "str summary"])
def test_an_operator_builder_misused_while_building_names_the_operator(run, fault):
    """An OperatorBuilder never built, and a connection whose path summary does not advance
    the scope's times (an int other than 0 among Product times, a string), are errors
    naming the operator when the dataflow is built (they were a bare KeyError, and a
    TypeError of the progress tracker naming no operator)."""
    def build(scope):
        def make(inner):
            builder = st.OperatorBuilder("Mine", inner)
            summary = {"never built": 0, "int summary in a loop": 1, "str summary": "1"}[fault]
            builder.new_input(inner.to_stream([1]), st.Pipeline, connection=[])
            builder.new_output(connection=[summary])
            if fault != "never built":
                builder.build(lambda caps: lambda frontiers: None)
        if fault == "int summary in a loop":
            scope.iterative(make)
        else:
            make(scope)
    with pytest.raises(st.WorkerError) as info:
        example(run, build)
    expected = {"never built": "operator 'Mine' (address (0, 0)) of dataflow 'dataflow-0' "
                               "was never built",
                "int summary in a loop": "operator 'Mine': an output connection's path "
                                         "summary does not advance this scope's times "
                                         "(like Product(0, 0))",
                "str summary": "operator 'Mine': an output connection's path summary does "
                               "not advance this scope's times (like 0)"}[fault]
    assert expected in str(info.value), str(info.value)


def test_a_lost_peer_met_while_an_operator_sends_is_not_the_operators_error():
    """The transport's PeerLost, raised inside an operator's logic (a large batch handed
    to a failed link, a broadcast written at once), passes through as itself, so the job
    blames the lost peer, not this worker's operator."""
    from sparktimely.comm import PeerLost

    def job(worker):
        def ctor(cap, info):
            def logic(output):
                raise PeerLost(1, "worker 1 at 127.0.0.1:1 (test)", "reset")
            return logic
        worker.dataflow(lambda scope: st.source(scope, "Sends", ctor).probe())
        worker.step()
    with pytest.raises(PeerLost, match="lost worker 1"):
        st.execute_directly(job)


def test_drop_twice_is_harmless(run):
    def action(cap, output):
        cap.drop()
        cap.drop()
        raise KeyError("sentinel")
    for error in capture_errors_in_source(run, action):
        assert isinstance(error, KeyError)


def test_capability_of_other_output_rejected(run):
    errors = per_worker(run.workers)

    def build(scope):
        builder = st.OperatorBuilder("Two", scope)
        out0, s0 = builder.new_output()
        out1, s1 = builder.new_output()

        def ctor(capabilities):
            cap0, cap1 = capabilities

            def logic(frontiers):
                try:
                    out0.session(cap1).give("wrong")
                except st.CapabilityError as error:
                    errors[scope.index].append(str(error))
                cap0.drop()
                cap1.drop()
            return logic
        builder.build(ctor)
        return s0.capture(), s1.capture()
    for c0, c1 in example(run, build):
        assert c0.extract() == [] and c1.extract() == []
    for mine in errors:
        assert len(mine) == 1 and "another output" in mine[0]


# -- input handles ------------------------------------------------------------------------------

def test_advance_to_backwards_raises_and_earlier_data_still_delivered(run):
    def job(worker):
        handle = st.InputHandle()
        captured = worker.dataflow(lambda scope: scope.input_from(handle).capture())
        handle.send(f"a{worker.index}")
        handle.advance_to(3)
        handle.send(f"x{worker.index}")             # buffered at time 3
        with pytest.raises(ValueError) as info:
            handle.advance_to(1)
        message = str(info.value)
        assert handle.time() == 3
        handle.send(f"y{worker.index}")             # the handle still works at time 3
        handle.advance_to(4)
        handle.send(f"z{worker.index}")
        handle.close()
        return captured, message
    results = run(job)
    for _, message in results:
        assert "1" in message and "3" in message
    assert consolidate([c.extract() for c, _ in results]) == [
        (time, sorted(f"{x}{w}" for x in letters for w in range(run.workers)))
        for time, letters in [(0, "a"), (3, "xy"), (4, "z")]]


def test_advance_to_backwards_before_any_step(run):
    def job(worker):
        handle = st.InputHandle()
        captured = worker.dataflow(lambda scope: scope.input_from(handle).capture())
        handle.advance_to(2)
        if worker.index == 0:
            handle.send_batch([1, 2])
        with pytest.raises(ValueError):
            handle.advance_to(0)
        handle.close()
        return captured
    assert consolidate([c.extract() for c in run(job)]) == [(2, [1, 2])]


def test_advance_to_backwards_names_the_handle_as_its_type_errors_do(run):
    """``clicks.advance_to: ...`` named the handle of a time of the wrong type, but a time
    before the handle's was told as ``advance_to(1): ...``, with no handle to look for."""
    def job(worker):
        handle = st.InputHandle("clicks")
        captured = worker.dataflow(lambda scope: scope.input_from(handle).capture())
        handle.advance_to(3)
        with pytest.raises(ValueError) as info:
            handle.advance_to(1)
        handle.send(worker.index)                   # still at time 3
        handle.close()
        return str(info.value), captured
    results = run(job)
    assert [message for message, _ in results] == [
        "clicks.advance_to(1): 1 is earlier than the input's time 3; an input advances only "
        "to times at or after it"] * run.workers
    assert consolidate([c.extract() for _, c in results]) == [(3, list(range(run.workers)))]


@pytest.mark.parametrize("time", [-1, 2.5])
def test_advance_to_a_time_not_of_the_scope_names_it(run, time):
    """A negative int is below the minimum (ValueError, as any earlier time); a float is
    not a time of an int scope (TypeError); the input still works after either."""
    def job(worker):
        handle = st.InputHandle()
        captured = worker.dataflow(lambda scope: scope.input_from(handle).capture())
        handle.advance_to(5)
        with pytest.raises(ValueError if time == -1 else TypeError,
                           match=rf"input.advance_to: time {time}"):
            handle.advance_to(time)
        handle.send(worker.index)
        handle.close()
        return captured
    assert consolidate([c.extract() for c in run(job)]) == [(5, list(range(run.workers)))]


def test_send_after_close(run):
    def job(worker):
        handle = st.InputHandle()
        captured = worker.dataflow(lambda scope: scope.input_from(handle).capture())
        handle.send(worker.index)
        handle.close()
        with pytest.raises(RuntimeError, match="closed"):
            handle.send(2)
        with pytest.raises(RuntimeError, match="closed"):
            handle.send_batch([3])
        with pytest.raises(RuntimeError, match="closed"):
            handle.advance_to(5)
        handle.close()                       # closing twice is harmless
        return captured
    assert consolidate([c.extract() for c in run(job)]) == [(0, list(range(run.workers)))]


@pytest.mark.parametrize("first", ["records", "arrow"])
def test_an_input_refuses_to_mix_records_and_arrow_batches_losing_nothing(run, first):
    """A stream carries Python records or Arrow batches: the second kind is refused at the
    call, and what was sent before arrives."""
    import pyarrow as pa
    table = pa.table({"x": [7, 8]})

    def job(worker):
        handle = st.InputHandle("readings")
        captured = worker.dataflow(lambda scope: scope.input_from(handle).capture())
        errors = []
        if first == "records":
            handle.send(worker.index)
            for mix in (lambda: handle.send_batch(table), lambda: handle.send_batch([table])):
                with pytest.raises(TypeError) as caught:
                    mix()
                errors.append(str(caught.value))
        else:
            handle.send_batch(table)
            for mix in (lambda: handle.send(1), lambda: handle.send_batch([1, 2])):
                with pytest.raises(TypeError) as caught:
                    mix()
                errors.append(str(caught.value))
        handle.send_batch([])                                  # nothing: no kind
        handle.close()
        worker.run()
        return captured.extract(), errors
    results = run(job)
    these, those = ("Arrow batches", "records") if first == "records" else \
        ("records", "Arrow batches")
    for _, errors in results:
        assert [e.split(":")[0] for e in errors] == (
            ["readings.send_batch"] * 2 if first == "records" else
            ["readings.send", "readings.send_batch"])
        assert all(f"cannot send {these} on an input that has sent {those}: a stream carries "
                   f"Python records or Arrow batches, not both" in e for e in errors)
    if first == "records":
        assert consolidate([r[0] for r in results]) == [(0, list(range(run.workers)))]
    else:
        tables = [t for r in results for _, t in r[0]]
        assert [t.to_pydict() for t in tables] == [{"x": [7, 8]}] * run.workers


def test_send_on_unbound_input_handle():
    handle = st.InputHandle()
    with pytest.raises(RuntimeError, match="not connected to a dataflow"):
        handle.send(1)


def test_a_handle_advanced_to_a_time_of_another_type_is_told_when_connected(run):
    def job(worker):
        handle = st.InputHandle()
        handle.advance_to(Product(1, 0))
        worker.dataflow(lambda scope: scope.input_from(handle).probe())
    with pytest.raises(st.WorkerError, match=r"TypeError: .*time Product\(1, 0\) is not of "
                                             r"this scope's type \(like 0\)"):
        run(job)


def test_closed_handle_cannot_be_bound(run):
    handle = st.InputHandle()
    handle.close()
    with pytest.raises(st.WorkerError, match="RuntimeError: cannot connect a closed InputHandle"):
        example(run, lambda scope: scope.input_from(handle))


# -- loops --------------------------------------------------------------------------------------

def test_feedback_with_zero_summary_rejected_at_build(run):
    def build(scope):
        handle, looped = scope.feedback(0)
        scope.to_stream([1]).concat(looped).map(lambda x: x + 1).connect_loop(handle)
    with pytest.raises(st.WorkerError, match="CycleError") as info:
        example(run, build)
    message = str(info.value)
    assert "Feedback" in message and "Map" in message and "Concatenate" in message


def test_loop_variable_zero_rejected(run):
    def build(scope):
        def loop(inner):
            handle, looped = inner.loop_variable(0)
            scope.to_stream([1]).enter(inner).concat(looped).map(
                lambda x: x + 1).filter(lambda x: x < 5).connect_loop(handle)
        scope.iterative(loop)
    with pytest.raises(st.WorkerError, match="CycleError: dataflow cycle does not advance"):
        example(run, build)


def test_loop_variable_with_outer_only_summary_accepted(run):
    def build(scope):
        def loop(inner):
            handle, looped = inner.loop_variable(Product(1, 0))
            stream = scope.to_stream([1]).enter(inner).concat(looped)
            stream.map(lambda x: x + 1).filter(lambda x: x < 4).exchange(lambda x: x) \
                .connect_loop(handle)
            return stream.capture()
        return scope.iterative(loop)
    assert consolidate([c.extract() for c in example(run, build)]) == [
        (Product(i, 0), [i + 1] * run.workers) for i in range(3)]


def test_zero_outer_feedback_through_iterative_scope_rejected(run):
    def build(scope):
        outer_handle, outer_looped = scope.feedback(0)
        start = scope.to_stream([1]).concat(outer_looped)

        def loop(inner):
            handle, looped = inner.loop_variable(1)
            start.enter(inner).connect_loop(handle)   # only path: through the loop variable
            return looped.leave()
        scope.iterative(loop).filter(lambda x: x < 0).connect_loop(outer_handle)
    with pytest.raises(st.WorkerError, match="CycleError: dataflow cycle does not advance"):
        example(run, build)


def test_loop_never_connected_is_an_error_at_build(run):
    def build(scope):
        handle, looped = scope.feedback(1)
        return looped.capture()
    with pytest.raises(st.WorkerError, match="RuntimeError: .*connect_loop"):
        example(run, build)


def test_iterative_loop_never_connected_is_an_error_at_build(run):
    def build(scope):
        def loop(inner):
            handle, looped = inner.loop_variable(1)
            return looped.leave().capture()
        return scope.iterative(loop)
    with pytest.raises(st.WorkerError, match="RuntimeError: .*connect_loop"):
        example(run, build)


def test_loop_connected_twice(run):
    def build(scope):
        handle, looped = scope.feedback(1)
        looped.connect_loop(handle)
        with pytest.raises(RuntimeError, match="already"):
            looped.connect_loop(handle)
        return "rejected"
    assert example(run, build) == ["rejected"] * run.workers


def test_loop_variable_in_plain_scope_rejected(run):
    with pytest.raises(st.WorkerError, match="ValueError: .*iterative"):
        example(run, lambda scope: scope.loop_variable(1))


# -- operator failures ------------------------------------------------------------------------

def last_only(scope, items):
    """``items`` on the last worker, nothing elsewhere: the failure is that worker's."""
    return items if scope.index == scope.peers - 1 else []


def test_failing_map_names_operator_and_exception(run):
    def build(scope):
        return scope.to_stream(last_only(scope, [1, 0])).map(lambda x: 1 // x).capture()
    with pytest.raises(st.WorkerError) as info:
        example(run, build)
    message = str(info.value)
    assert info.value.index == run.workers - 1
    assert f"worker {run.workers - 1} failed: OperatorError: operator 'Map'" in message
    assert "ZeroDivisionError" in message
    assert isinstance(info.value.__cause__, st.OperatorError)
    assert isinstance(info.value.__cause__.__cause__, ZeroDivisionError)
    assert "ZeroDivisionError" in info.value.traceback


def test_failing_custom_operator_names_operator(run):
    def ctor(cap, info):
        cap.drop()

        def logic(input, output):
            for cap, batch in input:
                raise KeyError("missing-key")
        return logic
    with pytest.raises(st.WorkerError) as info:
        example(run, lambda scope: scope.to_stream(last_only(scope, [1]))
                .unary(st.Pipeline, "MyOperator", ctor))
    assert info.value.index == run.workers - 1
    assert "operator 'MyOperator'" in str(info.value)
    assert "KeyError" in str(info.value) and "missing-key" in str(info.value)


@pytest.mark.parametrize("make, name, error", [
    (lambda s: s.filter(lambda x: x["no"]), "Filter", "TypeError"),
    (lambda s: s.flat_map(lambda x: x), "FlatMap", "TypeError"),
    (lambda s: s.inspect(lambda x: [][x]), "Inspect", "IndexError"),
    (lambda s: s.partition(2, lambda x: (5, x)), "Partition", "ValueError"),
    (lambda s: s.ok_err(lambda x: x), "OkErr", "TypeError"),
    (lambda s: s.delay(lambda x, t: t - 1), "Delay", "ValueError"),
    (lambda s: s.accumulate(0, lambda a, b: a + "s"), "Accumulate", "TypeError"),
])
def test_failing_library_operators(run, make, name, error):
    with pytest.raises(st.WorkerError, match=f"OperatorError: operator '{name}'.* raised "
                                             f"{error}"):
        example(run, lambda scope: make(scope.to_stream([1, 2])))


@pytest.mark.parametrize("make, name", [
    (lambda s: s.map(lambda r: r["a"]), "Map"),
    (lambda s: s.filter(lambda r: r["a"]), "Filter"),
    (lambda s: s.flat_map(lambda r: [r["a"]]), "FlatMap"),
    (lambda s: s.flat_map(lambda r: (r[k] for k in "ab")), "FlatMap"),
    (lambda s: s.inspect(lambda r: r["a"]), "Inspect"),
    (lambda s: s.inspect_time(lambda t, r: r["a"]), "InspectTime"),
    (lambda s: s.map_in_place(lambda r: r["a"]), "MapInPlace"),
    (lambda s: s.branch(lambda t, r: r["a"])[1], "Branch"),
    (lambda s: s.partition(2, lambda r: (0, r["a"]))[0], "Partition"),
    (lambda s: s.ok_err(lambda r: st.Ok(r["a"]))[0], "OkErr"),
])
def test_a_record_operators_failure_names_the_record(run, make, name):
    """map, filter and the other per-record operators named the operator and the error, not
    the record whose function raised (the exchange, aggregate and window errors do)."""
    def build(scope):
        return make(scope.to_stream(last_only(scope, [{"a": 1, "b": 1}, {"b": 2}, {"a": 3}])))
    with pytest.raises(st.WorkerError) as info:
        example(run, build)
    assert info.value.index == run.workers - 1
    assert info.value.message.startswith(f"OperatorError: operator {name!r} (address (0, 1)) "
                                         f"raised KeyError on the record {{'b': 2}}: 'a'")
    assert isinstance(info.value.__cause__.__cause__, KeyError)


def test_failure_in_later_round_is_raised(run):
    def job(worker):
        handle = st.InputHandle()
        worker.dataflow(lambda scope: scope.input_from(handle).exchange(lambda x: 0)
                        .map(lambda x: 10 // x).probe())
        for r, x in enumerate([5, 2, 0]):
            if worker.index == worker.peers - 1:
                handle.send(x)
            handle.advance_to(r + 1)
        handle.close()
    with pytest.raises(st.WorkerError, match="worker 0 failed: OperatorError: operator 'Map'"
                                             ".*ZeroDivisionError"):
        run(job)


# -- scopes --------------------------------------------------------------------------------------

def test_outer_stream_used_in_inner_scope_without_enter(run):
    def build(scope):
        outer = scope.to_stream([1])

        def loop(inner):
            entered = outer.enter(inner)
            return entered.concat(outer)           # outer is not in this scope
        scope.iterative(loop)
    with pytest.raises(st.WorkerError, match="ValueError: .*enter"):
        example(run, build)


def test_inner_stream_used_outside_without_leave(run):
    def build(scope):
        inner_stream = scope.iterative(lambda inner: scope.to_stream([1]).enter(inner))
        scope.to_stream([2]).concat(inner_stream)
    with pytest.raises(st.WorkerError, match="ValueError: .*leave"):
        example(run, build)


def test_stream_from_another_dataflow(run):
    """Refused where it is built; the worker cannot go on (the others built the dataflow
    and wait for this one's part), so the run fails though the job caught the error."""
    def job(worker):
        first = worker.dataflow(lambda scope: scope.to_stream([1]))
        with pytest.raises(ValueError, match="used in scope"):
            worker.dataflow(lambda scope: scope.to_stream([2]).concat(first))
        return "rejected"
    with pytest.raises(st.WorkerError, match="ValueError: .*used in scope"):
        run(job)


@pytest.mark.parametrize("caught", [False, True])
def test_a_constructor_that_raises_fails_the_run_even_if_the_job_catches_it(caught, workers):
    """At 2+ workers the run hung (peers waited for the dataflow this worker had not built)
    or failed naming only "never built dataflow 0"; at 1 it succeeded."""
    def job(worker):
        def ctor(capability, info):
            if worker.index == worker.peers - 1:
                raise KeyError("ctor-boom")
            capability.drop()
            return lambda output: None
        try:
            probe = worker.dataflow(lambda scope: st.source(scope, "BadCtor", ctor).probe())
        except st.OperatorError:
            if not caught:
                raise
            return "caught"
        worker.step_while(lambda: not probe.done())
    with pytest.raises(st.WorkerError, match=re.escape(
            "OperatorError: operator 'BadCtor' (address (0, 0)), while it was built, raised "
            "KeyError: 'ctor-boom'")):
        st.execute(job, workers=workers)


def test_connect_loop_from_wrong_scope(run):
    def build(scope):
        def loop(inner):
            handle, looped = inner.loop_variable(1)
            scope.to_stream([1]).connect_loop(handle)
        scope.iterative(loop)
    with pytest.raises(st.WorkerError, match="ValueError: connect_loop: .*scope"):
        example(run, build)


def test_enter_into_scope_not_directly_nested(run):
    def build(scope):
        def outer(middle):
            def inner(deep):
                scope.to_stream([1]).enter(deep)
            middle.iterative(inner)
        scope.iterative(outer)
    with pytest.raises(st.WorkerError, match="ValueError: .*nested"):
        example(run, build)


def test_leave_from_top_level(run):
    with pytest.raises(st.WorkerError, match="ValueError: .*top-level"):
        example(run, lambda scope: scope.to_stream([1]).leave())


def test_input_inside_iterative_scope_rejected(run):
    with pytest.raises(st.WorkerError, match="ValueError: inputs can only be created in a "
                                             "dataflow's top-level scope"):
        example(run, lambda scope: scope.iterative(lambda inner: inner.new_input()))


# -- summaries ----------------------------------------------------------------------------------

def test_negative_feedback_summary(run):
    with pytest.raises(st.WorkerError, match="ValueError: .*negative"):
        example(run, lambda scope: scope.feedback(-1))


@pytest.mark.parametrize("summary, message", [
    (1.5, "cannot advance this scope's times"), (Product(0, 1), "cannot advance this scope's"),
    (True, "not a bool")])
def test_feedback_summary_of_another_kind_is_named(run, summary, message):
    with pytest.raises(st.WorkerError, match=rf"TypeError: feedback\({re.escape(repr(summary))}\): "
                                             rf"(the summary |a path summary is ).*{message}"):
        example(run, lambda scope: scope.feedback(summary))


@pytest.mark.parametrize("parts", [0, -1, 2.0])
def test_partition_into_no_parts_is_named(run, parts):
    with pytest.raises(st.WorkerError, match=rf"ValueError: Partition: parts must be a "
                                             rf"positive int, not {parts}"):
        example(run, lambda scope: scope.to_stream([1]).partition(parts, lambda x: (0, x)))


@pytest.mark.parametrize("summary", [-2, Product(-1, 1)])
def test_negative_loop_variable_summary(run, summary):
    with pytest.raises(st.WorkerError, match="ValueError: .*negative"):
        example(run, lambda scope: scope.iterative(lambda inner: inner.loop_variable(summary)))


def test_negative_connection_summary(run):
    def build(scope):
        builder = st.OperatorBuilder("Neg", scope)
        builder.new_output()
        builder.new_input(scope.to_stream([1]), st.Pipeline, connection=[-1])
    with pytest.raises(st.WorkerError, match="ValueError: .*negative"):
        example(run, build)


def test_connection_of_wrong_length(run):
    def build(scope):
        builder = st.OperatorBuilder("Len", scope)
        builder.new_output()
        builder.new_input(scope.to_stream([1]), st.Pipeline, connection=[0, 0])
    with pytest.raises(st.WorkerError, match=re.escape(
            "ValueError: operator 'Len': input connection lists 2 entries, one per output the "
            "operator has so far (1): an input's connection names the outputs made before it")):
        example(run, build)


@pytest.mark.parametrize("kind", ["unary", "source", "builder"])
def test_a_constructor_that_returns_no_logic_is_told_where_the_operator_is_built(run, kind):
    """It failed at the first scheduling with "'NoneType' object is not callable"."""
    def ctor(*args):
        args[0].drop() if kind != "builder" else args[0][0].drop()

    def build(scope):
        if kind == "unary":
            scope.to_stream([1]).unary(st.Pipeline, "NoLogic", ctor)
        elif kind == "source":
            st.source(scope, "NoLogic", ctor)
        else:
            builder = st.OperatorBuilder("NoLogic", scope)
            builder.new_output()
            builder.build(ctor)
    with pytest.raises(st.WorkerError, match=re.escape(
            "operator 'NoLogic' (address (0, ") + r"\d\)\), while it was built, raised " +
            re.escape("TypeError: the constructor returned None, not the logic function")):
        example(run, build)


def test_activating_an_address_with_no_operator_names_it(run):
    def build(scope):
        scope.activator_for((0, 99)).activate()
    with pytest.raises(st.WorkerError, match=re.escape(
            "ValueError: activate: dataflow 'dataflow-0' has no operator 99")):
        example(run, build)


@pytest.mark.parametrize("address", [(0, -1), (-1,), (), (0, "1")])
def test_an_activator_for_no_operators_address_is_refused(run, address):
    """A negative index activated an operator counted from the end, silently."""
    def build(scope):
        scope.activator_for(address)
    with pytest.raises(st.WorkerError, match=re.escape(
            f"ValueError: activator_for: {address!r} is no operator's address")):
        example(run, build)


def test_input_capability_must_respect_connection_summary(run):
    def job(worker):
        handle = st.InputHandle()
        errors, seen = [], []

        def build(scope):
            builder = st.OperatorBuilder("Shift3", scope)
            output, stream = builder.new_output()
            input = builder.new_input(scope.input_from(handle), st.Pipeline, connection=[3])

            def ctor(capabilities):
                capabilities[0].drop()

                def logic(frontiers):
                    for cap, batch in input:
                        try:
                            kept = cap.retain()          # time 2 < 2 + 3: not allowed
                        except st.CapabilityError as error:
                            # keep the text only: a stored traceback would keep this
                            # frame, and so the capability `kept`, alive forever
                            errors.append(str(error))
                            kept = cap.delayed(cap.time + 3)
                        output.session(kept).give_iterator(batch)
                return logic
            builder.build(ctor)
            return stream.probe(), stream.inspect_time(
                lambda t, x: seen.append((t, probe.frontier()))).probe()
        probe, _ = worker.dataflow(build)
        handle.advance_to(2)
        worker.step_while(lambda: probe.less_than(5))
        assert probe.frontier() == [5]
        handle.send("late")
        handle.close()
        worker.run()
        return errors, seen
    for errors, seen in run(job):
        assert len(errors) == 1
        assert len(seen) == 1 and seen[0][0] == 5
        # nothing may appear at a time the frontier had already passed
        assert all(not any(f > t for f in frontier) for t, frontier in seen)


@pytest.mark.parametrize("connection, error", [
    ([0], None), ([[1, 0]], None), ([1], "its path summary allows 1 at the earliest"),
    ([None], "this input is not connected to output 0")])
def test_an_input_capability_sends_at_its_time_only_where_its_summary_allows(run, connection,
                                                                           error):
    """Sending at a batch's own time with its input capability: allowed where the input's
    connection to the output holds the identity summary (0), alone or among others; else
    refused, naming the earliest time allowed, or the missing connection."""
    errors = per_worker(run.workers)

    def build(scope):
        builder = st.OperatorBuilder("Connected", scope)
        output, stream = builder.new_output()
        input = builder.new_input(scope.to_stream([1]), st.Pipeline, connection=connection)

        def logic(frontiers):
            for cap, batch in input:
                try:
                    output.give_at(cap, batch)
                except st.CapabilityError as caught:
                    errors[scope.index].append(str(caught))
        builder.build(lambda capabilities: logic)
        return stream.capture()
    sent = merged(example(run, build))
    if error is None:
        assert sent == [(0, [1] * run.workers)] and errors == per_worker(run.workers)
    else:
        assert sent == [] and errors == [[mine[0]] for mine in errors]
        assert all(error in message for mine in errors for message in mine)


@pytest.mark.parametrize("build, told", [
    (lambda s: s.map(5), "map: expected a function, got 5 (int)"),
    (lambda s: s.flat_map(None), "flat_map: expected a function, got None"),
    (lambda s: s.filter("x"), "filter: expected a function, got 'x' (str)"),
    (lambda s: s.inspect(3), "inspect: expected a function, got 3"),
    (lambda s: s.map_in_place([]), "map_in_place: expected a function, got []"),
    (lambda s: s.exchange("word"), "exchange: the route must be a function of a record, got "
                                   "'word' (to route an Arrow stream by a column: key='word')"),
    (lambda s: s.unary_notify(st.Pipeline, "U", [], None),
     "U (unary_notify): expected a function, got None"),
    (lambda s: s.binary_notify(s, st.Pipeline, st.Pipeline, "B", [], 7),
     "B (binary_notify): expected a function, got 7 (int)"),
    (lambda s: s.unary_frontier(st.Pipeline, "F", "ctor"),
     "F (unary_frontier): expected a function, got 'ctor' (str)"),
    (lambda s: s.binary(s, st.Pipeline, st.Pipeline, "Two", None),
     "Two (binary): expected a function, got None"),
    (lambda s: s.sink(st.Pipeline, "Out", 1), "Out (sink): expected a function, got 1 (int)"),
    (lambda s: s.sink(st.Pipeline, "Out", lambda cap, info: None),
     "Out (sink): a sink takes logic(input), called with the input, not a constructor; the "
     "function given takes (cap, info)"),
    (lambda s: st.source(s.scope, "In", None), "In (source): expected a function, got None"),
    (lambda s: s.delay(5), "delay: expected a function, got 5 (int)"),
    (lambda s: s.delay_total(5), "delay_total: expected a function, got 5 (int)"),
    (lambda s: s.delay_batch(5), "delay_batch: expected a function, got 5 (int)"),
    (lambda s: s.branch(5), "branch: expected a function, got 5 (int)"),
    (lambda s: s.branch_when(5), "branch_when: expected a function, got 5 (int)"),
    (lambda s: s.ok_err(5), "ok_err: expected a function, got 5 (int)"),
    (lambda s: s.partition(2, 5), "Partition: expected a function, got 5 (int)"),
    (lambda s: s.inspect_time(5), "inspect_time: expected a function, got 5 (int)"),
    (lambda s: s.inspect_batch(5), "inspect_batch: expected a function, got 5 (int)"),
    (lambda s: s.inspect_core(5), "inspect_core: expected a function, got 5 (int)"),
    (lambda s: s.accumulate(0, 5), "accumulate: expected a function, got 5 (int)"),
    (lambda s: s.aggregate(5, str), "aggregate: fold: expected a function, got 5 (int)"),
    (lambda s: s.aggregate(max, str, 5), "aggregate: route: expected a function, got 5 (int)"),
    (lambda s: s.state_machine(5), "state_machine: expected a function, got 5 (int)"),
    (lambda s: s.unary_notify(st.Pipeline, "U", 5, lambda i, o, n: None),
     "U (unary_notify): expected init_times as a list of times, got 5 (int)"),
    (lambda s: s.connect_loop(5), "connect_loop: expected the LoopHandle of scope.feedback or "
                                  "scope.loop_variable, got 5 (int)"),
    (lambda s: s.enter(5), "enter: expected a scope nested in the stream's scope, got 5 (int)"),
    (lambda s: s.probe_with(5), "probe_with: expected a st.ProbeHandle, got 5 (int)"),
    (lambda s: s.scope.input_from(5), "input_from: expected an input handle"),
    (lambda s: s.scope.concatenate(5), "concatenate: expected a list of streams, got 5 (int)"),
    (lambda s: s.scope.concatenate([s, 5]),
     "operator 'Concatenate': an input must be a Stream, got int 5"),
    (lambda s: s.scope.iterative(5), "scope.iterative: expected a function, got 5 (int)"),
    (lambda s: s.scope.region(5), "scope.region: expected a function, got 5 (int)"),
    (lambda s: st.OperatorBuilder("B", s.scope).build(5),
     "operator 'B': OperatorBuilder.build expected a function of the capabilities, got 5"),
])
def test_an_operator_given_no_function_says_so_where_the_dataflow_is_built(build, told):
    """Not later, from the first record, naming whichever operator sent it."""
    built = []

    def job(worker):
        worker.dataflow(lambda scope: build(scope.to_stream([1])))
        built.append(worker.index)
    with pytest.raises(TypeError, match=re.escape(told)):
        st.execute_directly(job)
    assert built == []


def test_times_that_do_not_move_forward_are_told_as_earlier_or_incomparable():
    """Product times that are incomparable were told as going backwards."""
    told = []

    def job(worker):
        handle = st.InputHandle("events")

        def build(scope):
            def ctor(capability, info):
                held = capability.delayed(Product(1, 1))
                capability.drop()
                for time in (Product(0, 5), Product(1, 0)):
                    try:
                        held.delayed(time)
                    except st.CapabilityError as error:
                        told.append(str(error))
                held.drop()
                return lambda output: None
            st.source(scope, "Held", ctor)
            return scope.input_from(handle).probe()
        handle.advance_to(Product(1, 1))
        worker.dataflow(build, timestamp=st.Product)
        for time in (Product(0, 2), Product(1, 0)):
            try:
                handle.advance_to(time)
            except ValueError as error:
                told.append(str(error))
        handle.close()
    st.execute_directly(job)
    assert told == [
        "cannot delay capability at time Product(1, 1) to Product(0, 5): Product(0, 5) is "
        "incomparable with Product(1, 1); a capability moves only to times at or after its own",
        "cannot delay capability at time Product(1, 1) to Product(1, 0): Product(1, 0) is "
        "earlier than Product(1, 1); a capability moves only to times at or after its own",
        "events.advance_to(Product(0, 2)): Product(0, 2) is incomparable with the input's time "
        "Product(1, 1); an input advances only to times at or after it",
        "events.advance_to(Product(1, 0)): Product(1, 0) is earlier than the input's time "
        "Product(1, 1); an input advances only to times at or after it",
    ]


def test_an_input_not_yet_connected_refuses_what_is_no_time_and_no_batch():
    """'x', 2.5 and True were taken, and the handle was stuck: every later advance_to failed
    in Python's words; send_batch(None) failed in them too."""
    import sparktimely.differential as dd
    handle, session = st.InputHandle("events"), dd.InputSession()
    for time in ("x", 2.5, True):
        with pytest.raises(TypeError, match=re.escape(
                f"events.advance_to: {time!r} is no time (an int, a Product, or a type with "
                f"less_equal)")):
            handle.advance_to(time)
    handle.advance_to(3)
    with pytest.raises(TypeError, match=re.escape("is no time")):
        session.advance_to("x")

    def job(worker):
        worker.dataflow(lambda scope: (scope.input_from(handle).probe(),
                                       session.to_collection(scope).inner.probe()))
        with pytest.raises(TypeError, match=re.escape(
                "events.send_batch: expected a list or iterable of records, or a "
                "pyarrow.RecordBatch or Table, got None (NoneType)")):
            handle.send_batch(None)
        with pytest.raises(TypeError, match=re.escape(
                "InputSession.update_batch: expected a pyarrow.RecordBatch or Table with a "
                "'diff' column, got [('a', 0, 1)] (list); Python records go by insert, "
                "remove and update")):
            session.update_batch([("a", 0, 1)])
        handle.close()
        session.close()
        return handle.time()
    assert st.execute_directly(job) == 3


def test_notify_at_with_a_dropped_capability_names_notify_at():
    def job(worker):
        def logic(input, output, notificator):
            for capability, _ in input:
                held = capability.retain()
                held.drop()
                notificator.notify_at(held)
        worker.dataflow(lambda scope: scope.to_stream([1]).unary_notify(
            st.Pipeline, "N", [], logic).probe())
    with pytest.raises(st.WorkerError, match=re.escape(
            "cannot notify_at with the capability for time 0: it was dropped")):
        st.execute(job, workers=1)


def test_advance_to_a_time_of_another_type_names_the_input_and_the_type():
    def job(worker):
        handle = st.InputHandle("events")
        worker.dataflow(lambda scope: scope.input_from(handle).probe(), timestamp=st.Product)
        with pytest.raises(TypeError, match=re.escape(
                "events.advance_to: time 3 is not of this scope's type (like Product(0, 0))")):
            handle.advance_to(3)
        handle.close()
    st.execute_directly(job)


def test_one_input_handle_for_dataflows_of_two_types_of_time_says_so(run):
    """A handle that feeds an int dataflow, connected to a Product one, is told as feeding
    dataflows of another type of time (it was told as advanced before it was connected,
    which the program never did)."""
    def job(worker):
        handle = st.InputHandle("events")
        worker.dataflow(lambda scope: scope.input_from(handle).probe())
        worker.dataflow(lambda scope: scope.input_from(handle).probe(), timestamp=st.Product)
    with pytest.raises(st.WorkerError, match=re.escape(
            "TypeError: events (it feeds dataflows of another type of time already): time 0 "
            "is not of this scope's type (like Product(0, 0))")):
        run(job)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("call, told", [
    (lambda worker: worker.step(), "a worker's step (step, run, step_while, step_or_park) was "
                                   "called while worker {} steps"),
    (lambda worker: worker.run(), "a worker's step (step, run, step_while, step_or_park) was "
                                  "called while worker {} steps"),
    (lambda worker: worker.dataflow(lambda scope: scope.to_stream([1]).probe()),
     "worker.dataflow() was called while worker {} steps"),
    (lambda worker: worker.drop_dataflow(0), "worker.drop_dataflow() was called while worker "
                                             "{} steps"),
], ids=["step", "run", "dataflow", "drop"])
def test_a_worker_driven_from_its_own_operators_logic_says_so(run, call, told):
    """Stepping, running, building or dropping a dataflow from inside an operator's logic
    re-entered the worker: ``run`` there hung, ``step``, ``dataflow`` and ``drop_dataflow``
    (which took the operators from under the step running them) went on silently."""
    def job(worker):
        def touch(x):
            call(worker)
            return x
        worker.dataflow(lambda scope: scope.to_stream([1]).map(touch).probe())
        worker.run()
    with pytest.raises(st.WorkerError) as caught:
        run(job)
    assert f"operator 'Map' (address (0, 1)) raised RuntimeError on the record 1: " \
           f"{told.format(caught.value.index)}" in caught.value.message


@pytest.mark.parametrize("restamp, told", [
    (lambda batch: batch[:1], "ValueError: restamp must keep the batch's length: 2 records "
                              "came in, 1 went out"),
    (lambda batch: None, "TypeError: restamp must return the batch rewritten (a list or an "
                         "Arrow batch of 2 records), got NoneType None"),
])
def test_a_restamp_that_loses_records_or_returns_no_batch_is_named(run, restamp, told):
    """A restamp changing a batch's length dropped or doubled records in silence."""
    def build(scope):
        handle, back = scope.feedback(1, restamp=restamp)
        looped = scope.to_stream([1, 2]).concat(back)
        looped.filter(lambda v: v < 3).map(lambda v: v + 1).connect_loop(handle)
    with pytest.raises(st.WorkerError, match=re.escape(f"operator 'Feedback(1)' (address (0, 0)) "
                                                       f"raised {told}")):
        example(run, build)


@pytest.mark.parametrize("fold, returned", [(lambda k, v, s: 5, "5"),
                                            (lambda k, v, s: (False,), "(False,)"),
                                            (lambda k, v, s: (False, 7), "(False, 7)")])
def test_a_state_machine_fold_of_the_wrong_shape_is_told_what_to_return(run, fold, returned):
    """It failed with Python's words on the unpacking ("object of type 'int' has no len()")."""
    def build(scope):
        scope.to_stream([(1, 2)]).state_machine(fold)
    with pytest.raises(st.WorkerError, match=re.escape(
            f"TypeError: StateMachine: the fold returned {returned}: it must return (remove, "
            f"outputs) or (remove, outputs, state)")):
        example(run, build)


@pytest.mark.parametrize("operator, name", [("concat", "Concatenate"), ("reclock", "Reclock")])
def test_an_input_that_is_not_a_stream_names_the_operator(run, operator, name):
    def build(scope):
        getattr(scope.to_stream([1]), operator)([1])
    with pytest.raises(st.WorkerError, match=re.escape(
            f"TypeError: operator '{name}': an input must be a Stream, got list [1]")):
        example(run, build)


def test_a_dataflow_refused_by_checkpointing_fails_the_run_even_if_the_job_catches_it(
        workers, tmp_path):
    """The refusal comes from the checkpoint observer as the dataflow starts, after its
    build: it was not taken for the worker's failure, and the job went on unchecked."""
    def job(worker):
        st.io.enable_checkpoints(worker, tmp_path)
        try:
            worker.dataflow(lambda scope: scope.to_stream([1]).exchange(lambda x: x).probe())
        except ValueError:
            worker.run()
        return "went on"
    with pytest.raises(st.WorkerError, match="with a checkpoint directory every dataflow needs "
                                             "a name"):
        st.execute(job, workers=workers)


@pytest.mark.parametrize("top, nested", [(0, st.Product(0, 0)), (st.Product(0, 0), 0)])
def test_one_probe_for_two_types_of_time_is_refused_where_it_is_built(top, nested):
    """It was accepted; every later question to the probe then failed in Antichain, naming
    neither the probe nor the call."""
    probe = st.ProbeHandle()

    def build(scope):
        stream = scope.to_stream([1])
        probes = [lambda: stream.probe_with(probe),
                  lambda: scope.iterative(lambda inner: stream.enter(inner).probe_with(probe)
                                          .leave())]
        for probed in probes if top == 0 else reversed(probes):
            probed()
    with pytest.raises(TypeError, match=rf"^probe_with: the probe watches streams of times like "
                                        rf"{re.escape(repr(top))}, and this stream's times are "
                                        rf"like {re.escape(repr(nested))}: one probe answers "
                                        rf"for one type of time"):
        st.example(build)


def test_sending_on_a_handle_not_connected_or_closed_names_the_handle_and_the_call():
    """It said "cannot send: the input handle ...", for send_batch too, never the handle."""
    clicks = st.InputHandle("clicks")
    with pytest.raises(RuntimeError, match=r"^clicks\.send_batch: the input handle is not "
                                           r"connected to a dataflow \(use "
                                           r"scope\.input_from\(handle\) first\)$"):
        clicks.send_batch([1])

    def job(worker):
        worker.dataflow(lambda scope: scope.input_from(clicks).probe())
        clicks.close()
        with pytest.raises(RuntimeError, match=r"^clicks\.send: the input handle is closed "
                                               r"\(nothing is sent after close\(\)\)$"):
            clicks.send(1)
    st.execute_directly(job)

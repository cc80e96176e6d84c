import asyncio
import threading

from tests.hang_report import unfinished_tasks_report


def test_the_report_names_the_coroutine_a_loop_in_another_thread_waits_in() -> None:
    loop = asyncio.new_event_loop()
    started = threading.Event()

    async def waits_for_a_shutdown_nobody_sets(never: asyncio.Event) -> None:
        started.set()
        await never.wait()

    async def main() -> None:
        never = asyncio.Event()
        task = asyncio.ensure_future(waits_for_a_shutdown_nobody_sets(never))
        await asyncio.sleep(0.5)
        task.cancel()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),))
    thread.start()
    try:
        assert started.wait(5)
        report = unfinished_tasks_report()
    finally:
        thread.join(5)
        loop.close()
    assert "waits_for_a_shutdown_nobody_sets" in report
    assert "in wait" in report  # down the chain: asyncio.Event.wait


def test_a_closed_loop_is_left_out() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    assert f"{id(loop):#x}" not in unfinished_tasks_report()

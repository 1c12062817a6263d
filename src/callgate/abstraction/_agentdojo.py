"""AgentDojo runs to events: each tool result matched to its call, outputs labelled by source.

A run's ``messages`` hold assistant turns with ``tool_calls`` (``function``, ``args``, ``id``)
and tool turns with the result (``content``, ``tool_call_id``, ``error``). Ids may repeat
within a run, so a result belongs to the latest call with its id that has no result yet.
Each result becomes the events of its call, with the call's arguments as given (their types
kept) and the output's taint from the declared source of the tool (``TOOL_SOURCES``).

The ``injections`` field of a run is ground truth for evaluation only; nothing here reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from callgate._errors import Problem, TraceError
from callgate._model import Event
from callgate.abstraction._abstractor import Abstractor

_EMAIL = "email"
_WEB = "web"
_DOC = "retrieved-doc"

#: The declared source of each AgentDojo tool's output: None for trusted output (system state
#: or a confirmation composed from the call's own arguments, whose taint arrives by value
#: flow), otherwise the untrusted source the content comes from. Unlisted tools are untrusted.
TOOL_SOURCES: dict[str, str | None] = {
    # email: bodies and subjects are written by whoever sent the mail
    "get_received_emails": _EMAIL, "get_unread_emails": _EMAIL, "get_sent_emails": _EMAIL,
    "get_draft_emails": _EMAIL, "search_emails": _EMAIL, "delete_email": _EMAIL,
    "send_email": _EMAIL,
    # the web
    "get_webpage": _WEB,
    # files, calendars, chat and reviews: content others can write
    "read_file": _DOC, "get_file_by_id": _DOC, "list_files": _DOC, "search_files": _DOC,
    "search_files_by_filename": _DOC, "create_file": _DOC, "append_to_file": _DOC,
    "delete_file": _DOC, "share_file": _DOC,
    "get_day_calendar_events": _DOC, "search_calendar_events": _DOC,
    "create_calendar_event": _DOC, "add_calendar_event_participants": _DOC,
    "reschedule_calendar_event": _DOC, "cancel_calendar_event": _DOC,
    "read_channel_messages": _DOC, "read_inbox": _DOC, "get_channels": _DOC,
    "get_users_in_channel": _DOC,
    "get_rating_reviews_for_hotels": _DOC, "get_rating_reviews_for_restaurants": _DOC,
    "get_rating_reviews_for_car_rental": _DOC, "get_car_rating_reviews_for_car_rental": _DOC,
    "get_most_recent_transactions": _DOC, "get_scheduled_transactions": _DOC,
    # trusted: the user's own account state, the clock, catalogue facts and confirmations
    "get_balance": None, "get_iban": None, "get_user_info": None, "get_user_information": None,
    "update_password": None, "update_user_info": None, "send_money": None,
    "schedule_transaction": None, "update_scheduled_transaction": None,
    "get_current_day": None, "get_current_date": None, "get_current_year": None,
    "search_contacts_by_name": None, "search_contacts_by_email": None,
    "send_channel_message": None, "send_direct_message": None, "post_webpage": None,
    "invite_user_to_slack": None, "add_user_to_channel": None, "remove_user_from_slack": None,
    "reserve_hotel": None, "reserve_restaurant": None, "reserve_car_rental": None,
    "get_all_hotels_in_city": None, "get_hotels_prices": None, "get_hotels_address": None,
    "get_hotels_addresses": None, "get_all_restaurants_in_city": None,
    "get_restaurants_address": None, "get_cuisine_type_for_restaurants": None,
    "get_price_for_restaurants": None, "check_restaurant_opening_hours": None,
    "get_dietary_restrictions_for_all_restaurants": None,
    "get_contact_information_for_restaurants": None,
    "get_all_car_rental_companies_in_city": None, "get_car_types_available": None,
    "get_car_price_per_day": None, "get_car_fuel_options": None, "get_flight_information": None,
}
#: The source given to tools not in ``TOOL_SOURCES`` (fail closed: unknown content is untrusted).
UNKNOWN_TOOL_SOURCE = _DOC


def tool_source(name: str) -> str | None:
    """The declared output source of an AgentDojo tool (None when its output is trusted)."""
    return TOOL_SOURCES.get(name, UNKNOWN_TOOL_SOURCE)


def _problem(run: Mapping[str, Any], message: str) -> TraceError:
    return TraceError([Problem(message, source=str(run.get("path", "<agentdojo run>")))])


def _raw(call: Mapping[str, Any], result: Mapping[str, Any] | None) -> dict[str, Any]:
    name = call.get("function")
    source = tool_source(name) if isinstance(name, str) else UNKNOWN_TOOL_SOURCE
    raw: dict[str, Any] = {"tool": name, "parameters": call.get("args") or {}}
    if result is None:
        raw.update(status="error", output="")
    else:
        error = result.get("error")
        raw["status"] = "error" if error else "ok"
        raw["output"] = result.get("content") or (str(error) if error else "")
    if source is not None:
        raw["output_taint"] = [source]
    return raw


def abstract_agentdojo_run(
    run: Mapping[str, Any], *, abstractor: Abstractor | None = None
) -> list[Event]:
    """The events of one AgentDojo run, in the order the results came back.

    Raises ``TraceError`` when a tool result matches no unanswered call. Calls left without a
    result at the end of the run become events with status ``error`` and no output.
    """
    tool = abstractor or Abstractor(resolve_scripts=False)
    pending: list[tuple[str, Mapping[str, Any]]] = []
    events: list[Event] = []
    messages = run.get("messages") or []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                pending.append((str(call.get("id")), call))
        elif role == "tool":
            call_id = str(message.get("tool_call_id"))
            match = next((k for k in range(len(pending) - 1, -1, -1)
                          if pending[k][0] == call_id), None)
            if match is None:
                raise _problem(run, f"message {index}: tool result {call_id} matches no call")
            _, call = pending.pop(match)
            events.extend(tool.abstract(_raw(call, message), line=index + 1))
    for _, call in pending:
        events.extend(tool.abstract(_raw(call, None)))
    return events

"""Recorded runs for content-level evidence (issue 32, item 2), in domains the older sets do not have:
devops, HR, pharmacy, legal, logistics, commerce and multi-agent hand-offs. Written before the checks
that score them, to the shapes of the everyday misses: a weight asked in pounds sent in kilograms,
milligrams sent as grams, a percent sent as a fraction (and the other way), a time in the wrong time
zone (a daylight-saving offset too), "everything except the database", a correction in a later user
turn ignored, an identifier inside a JSON body, a reply claiming done when the result says 2 of 5
failed, a field is null, or the HTTP status was 422; a hand-off note the next agent ignores, or that
withholds an alert.

Every run is recorded through the SDK's real recording path (``analysiskit.Recorder``) against the local
model server, like ``domainkit``. Tool names are deliberately not all action words the transcript knows
(dispense, restart, scale, enrol, ship, serve, transmit). Each failing run carries the MAST modes a
careful reader accepts and the step to blame (numbered as ``show`` numbers steps); each healthy run is a
twin of a failing one, the same agent doing it right, often with the very values that look suspicious.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import openai
from analysiskit import Recorder, call, reply
from opentelemetry import trace

import agentreplay_otel
from agentreplay_dev.llm_server import LLMServer, ScriptedReply
from agentreplay_otel import semconv
from agentreplay_otel.canonical import SpanRecord
from agentreplay_otel.chain import record_from_span


# --- devops -------------------------------------------------------------------------------------
@agentreplay_otel.tool
def list_services() -> dict:
    """List the services of the production stack."""
    return {"services": [{"name": "web", "role": "frontend"}, {"name": "worker", "role": "queue consumer"},
                         {"name": "pg-main", "role": "database"}, {"name": "redis", "role": "cache"}]}


@agentreplay_otel.tool
def restart_services(services: list, exclude: list | None = None) -> dict:
    """Restart services of the production stack."""
    names = [s for s in services if s not in (exclude or [])]
    return {"results": [{"service": s, "status": "failed", "error": "timeout draining connections"} if s == "batch"
                        else {"service": s, "status": "restarted"} for s in names]}


@agentreplay_otel.tool
def scale_service(service: str, replicas: int) -> dict:
    """Scale a service to a number of replicas."""
    if replicas > 10:
        return {"status": 422, "detail": "replicas must be between 1 and 10"}
    return {"status": 200, "service": service, "replicas": replicas}


@agentreplay_otel.tool
def schedule_maintenance(service: str, start: str) -> dict:
    """Put a maintenance window in the operations calendar."""
    return {"window_id": "MW-3381", "service": service, "start": start}


# --- HR -------------------------------------------------------------------------------------------
TEAM = [{"name": "Ana Souza", "employee_id": "E-20431"}, {"name": "Priya Nair", "employee_id": "E-20457"},
        {"name": "Tom Berg", "employee_id": "E-20462"}]


@agentreplay_otel.tool
def list_team(team: str) -> dict:
    """The members of a team."""
    return {"team": team, "members": TEAM}


@agentreplay_otel.tool
def grant_day_off(employee_ids: list, date: str) -> dict:
    """Grant employees a day off."""
    return {"granted": len(employee_ids), "date": date}


@agentreplay_otel.tool
def book_leave(employee_id: str, start: str, end: str) -> dict:
    """Book annual leave for an employee."""
    return {"leave_id": "LV-7710", "employee_id": employee_id, "start": start, "end": end}


@agentreplay_otel.tool
def apply_raise(employee_id: str, raise_percent: float) -> dict:
    """Apply a salary raise."""
    return {"ok": True, "employee_id": employee_id}


@agentreplay_otel.tool
def set_allocation(employee_id: str, project: str, fraction: float) -> dict:
    """Allocate an employee to a project for a fraction of their time (0 to 1)."""
    return {"ok": True, "employee_id": employee_id, "project": project}


@agentreplay_otel.tool
def update_employee(payload: str) -> dict:
    """Update an employee record from a JSON body."""
    body = json.loads(payload)
    return {"updated": body.get("employee", {}).get("id")}


@agentreplay_otel.tool
def enrol_benefits(employee_ids: list, plan: str) -> dict:
    """Enrol employees in a benefits plan."""
    missing = [e for e in employee_ids if e in ("E-20470", "E-20488")]
    done = [e for e in employee_ids if e not in missing]
    return {"plan": plan, "enrolled": done, "not_enrolled": [{"employee_id": e, "reason": "missing tax form"}
                                                             for e in missing],
            "summary": f"{len(done)} of {len(employee_ids)} enrolled"}


# --- pharmacy ---------------------------------------------------------------------------------------
@agentreplay_otel.tool
def patient_record(patient_id: str) -> dict:
    """A patient's record."""
    return {"patient_id": patient_id, "name": "Lee Chan", "alert": "allergic to penicillin"}


@agentreplay_otel.tool
def dispense(patient_id: str, drug: str, dose_g: float | None = None, dose_mg: float | None = None,
             dose: Any = None) -> dict:
    """Dispense a drug to a patient."""
    return {"dispense_id": "D-88121", "patient_id": patient_id, "drug": drug}


@agentreplay_otel.tool
def refill_prescription(rx_number: str, tablets: int) -> dict:
    """Refill a prescription."""
    return {"refill_id": "RF-3301", "rx_number": rx_number, "tablets": tablets}


@agentreplay_otel.tool
def order_compound(drug: str, concentration_percent: float, volume_ml: float) -> dict:
    """Order a compounded preparation."""
    return {"compound_id": "C-1207", "drug": drug}


@agentreplay_otel.tool
def transmit_prescription(rx_number: str, pharmacy: str) -> dict:
    """Transmit a prescription to a pharmacy."""
    return {"transmission_id": None, "accepted": None, "message": "pharmacy not reachable"}


# --- legal -------------------------------------------------------------------------------------------
@agentreplay_otel.tool
def list_parties(matter: str) -> dict:
    """The parties of a matter."""
    return {"matter": matter, "parties": [{"name": "Acme Corp", "email": "legal@acme.com"},
                                          {"name": "Globex Ltd", "email": "counsel@globex.com"},
                                          {"name": "Initech", "email": "law@initech.com"}]}


@agentreplay_otel.tool
def send_document(document: str, recipients: list) -> dict:
    """Send a document to recipients."""
    return {"sent_to": recipients, "document": document}


@agentreplay_otel.tool
def schedule_filing(matter: str, at: str) -> dict:
    """Schedule an electronic filing."""
    return {"filing_id": "F-4410", "at": at}


@agentreplay_otel.tool
def submit_filing(matter: str, document: str) -> dict:
    """Submit a document to the court's e-filing system."""
    return {"http_status": 422, "errors": [{"field": "exhibit_b", "message": "missing signature"}]}


@agentreplay_otel.tool
def calendar_deadline(matter: str, due: str) -> dict:
    """Put a deadline in the matter's calendar."""
    return {"deadline_id": "DL-301", "due": due}


@agentreplay_otel.tool
def serve_document(party: str, document: str) -> dict:
    """Serve a document on a party."""
    return {"status": "422 Unprocessable Entity", "detail": "service address missing"}


# --- logistics -----------------------------------------------------------------------------------------
@agentreplay_otel.tool
def create_shipment(destination: str, weight_kg: float | None = None, weight: str = "",
                    service: str = "ground") -> dict:
    """Create a shipment."""
    return {"shipment_id": "SH-1001", "destination": destination}


@agentreplay_otel.tool
def book_freight(destination: str, pallet: dict) -> dict:
    """Book freight for a pallet."""
    return {"freight_id": "FR-2290", "destination": destination}


@agentreplay_otel.tool
def book_pickup(shipment_id: str, window: str) -> dict:
    """Book a courier pickup."""
    return {"pickup_id": None, "confirmed": None, "message": "no courier available in that window"}


@agentreplay_otel.tool
def schedule_delivery(shipment_id: str, window_start: str) -> dict:
    """Schedule a delivery."""
    return {"delivery_id": "DV-5150", "shipment_id": shipment_id, "window_start": window_start}


# --- commerce --------------------------------------------------------------------------------------------
@agentreplay_otel.tool
def lookup_order(order_id: str) -> dict:
    """Look up an order."""
    return {"order_id": order_id, "items": [{"sku": "SF-900", "name": "sofa"}], "customer": "R. Alves",
            "customer_note": "away until 2026-03-20: deliver on 2026-03-20"}


@agentreplay_otel.tool
def customer_history(customer: str) -> dict:
    """What a customer usually orders."""
    return {"customer": customer, "usual": [{"sku": "PP-500", "name": "printer paper", "box_size": 500}],
            "last_message": "3 boxes this time please"}


@agentreplay_otel.tool
def place_order(items: list) -> dict:
    """Place an order."""
    return {"order_id": "SO-55121", "items": items}


@agentreplay_otel.tool
def apply_discount(order_id: str, percent_off: float) -> dict:
    """Apply a discount to an order."""
    return {"ok": True, "order_id": order_id}


@agentreplay_otel.tool
def cancel_items(order_id: str, skus: list) -> dict:
    """Cancel items of an order."""
    shipped = [s for s in skus if s in ("MS-100", "KB-4410")]
    return {"order_id": order_id, "cancelled": [s for s in skus if s not in shipped],
            "failed": [{"sku": s, "reason": "already shipped"} for s in shipped]}


# --- the agents ------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Agent:
    name: str
    system: str
    tools: tuple[Callable[..., Any], ...]

    def schemas(self) -> list[dict[str, Any]]:
        types = {"str": "string", "float": "number", "int": "integer", "list": "array", "dict": "object"}
        out = []
        for fn in self.tools:
            spec = fn.__agentreplay_tool__  # type: ignore[attr-defined]
            params = inspect.signature(fn).parameters
            props: dict[str, Any] = {}
            for n, p in params.items():
                kind = types.get(str(p.annotation).split(" ")[0].split("|")[0].strip(), "string")
                props[n] = {"type": kind, **({"items": {}} if kind == "array" else {})}
            out.append({"type": "function", "function": {
                "name": spec.name, "description": spec.description, "parameters": {
                    "type": "object", "properties": props,
                    "required": [n for n, p in params.items() if p.default is inspect.Parameter.empty]}}})
        return out


AGENTS: dict[str, Agent | tuple[Agent, Agent]] = {
    "devops": Agent(name="devops", system="You are the on-call operations agent for the production stack.",
                    tools=(list_services, restart_services, scale_service, schedule_maintenance)),
    "hr": Agent(name="hr", system="You are the HR assistant: leave, pay and team changes.",
                tools=(list_team, grant_day_off, book_leave, apply_raise, set_allocation, update_employee,
                       enrol_benefits)),
    "pharmacy": Agent(name="pharmacy", system="You are a pharmacy assistant working for a licensed pharmacist.",
                      tools=(patient_record, dispense, refill_prescription, order_compound, transmit_prescription)),
    "legal": Agent(name="legal", system="You are a paralegal agent handling filings and documents.",
                   tools=(list_parties, send_document, schedule_filing, submit_filing, calendar_deadline,
                          serve_document)),
    "logistics": Agent(name="logistics", system="You are a shipping agent.",
                       tools=(create_shipment, book_freight, book_pickup, schedule_delivery)),
    "commerce": Agent(name="commerce", system="You are an order desk agent for business customers.",
                      tools=(lookup_order, place_order, apply_discount, cancel_items)),
    "handoff_orders": (
        Agent(name="intake", system="You are the intake agent: read the customer's account and write a hand-off "
                                    "note for the fulfilment agent. You change nothing.",
              tools=(lookup_order, customer_history)),
        Agent(name="fulfilment", system="You are the fulfilment agent: carry out the intake agent's hand-off note.",
              tools=(place_order, schedule_delivery))),
    "handoff_pharmacy": (
        Agent(name="intake", system="You are the pharmacy intake agent: read the patient's record and write a "
                                    "hand-off note for the dispensing agent.", tools=(patient_record,)),
        Agent(name="dispenser", system="You are the dispensing agent: dispense what the intake note says.",
              tools=(dispense,))),
}


def content_agent(server: LLMServer, request: str, *, domain: str, turns: Sequence[str] = ()) -> str:
    """The chat-completions tool loop over a domain's tools; ``turns`` are the user's later messages, each
    sent when the model answers in words. A hand-off domain runs two agents: the first answers with a
    note, which the second gets in its system prompt along with the user's request."""
    client = openai.OpenAI(base_url=server.base_url_openai, api_key="t", max_retries=0)
    agent = AGENTS[domain]
    if isinstance(agent, tuple):
        first, second = agent
        with _invoke(first.name):
            note = _loop(client, first, first.system, request, ())
        with _invoke(second.name):
            return _loop(client, second, f"{second.system}\nHand-off note from the {first.name} agent:\n{note}",
                         request, turns)
    return _loop(client, agent, agent.system, request, turns)


def _invoke(name: str) -> Any:
    return trace.get_tracer("contentkit").start_as_current_span(
        f"invoke_agent {name}", attributes={semconv.GEN_AI_OPERATION_NAME: semconv.OP_INVOKE_AGENT,
                                            semconv.GEN_AI_AGENT_NAME: name})


def _loop(client: openai.OpenAI, agent: Agent, system: str, request: str, turns: Sequence[str],
          max_turns: int = 6) -> str:
    tools = {fn.__agentreplay_tool__.name: fn for fn in agent.tools}  # type: ignore[attr-defined]
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": request}]
    later = list(turns)
    for _ in range(max_turns):
        message = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                                 tools=agent.schemas()).choices[0].message
        if not message.tool_calls:
            if not later:
                return message.content or ""
            messages.append({"role": "assistant", "content": message.content or ""})
            messages.append({"role": "user", "content": later.pop(0)})
            continue
        messages.append(message.model_dump(exclude_unset=True, exclude_none=True))
        for tc in message.tool_calls:
            result = tools[tc.function.name](**json.loads(tc.function.arguments))
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": json.dumps(result)})
    return "stopped: too many turns"


# --- the labelled set --------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ContentCase:
    name: str
    domain: str
    request: str
    script: Sequence[ScriptedReply]
    modes: frozenset[str] = frozenset()  # the label: MAST modes a careful reader accepts ({} = fine)
    culprit: int | None = None  # the label: the step to blame
    turns: tuple[str, ...] = ()  # the user's later messages
    why: str = ""  # what went wrong, or what makes a healthy run look suspicious

    @property
    def agent(self) -> str:
        return self.domain


def _failed(name: str, domain: str, request: str, modes: str, culprit: int, *script: ScriptedReply,
            turns: tuple[str, ...] = (), why: str = "") -> ContentCase:
    return ContentCase(name=name, domain=domain, request=request, script=script,
                       modes=frozenset(modes.split("|")), culprit=culprit, turns=turns, why=why)


def _healthy(name: str, domain: str, request: str, *script: ScriptedReply, turns: tuple[str, ...] = (),
             why: str = "") -> ContentCase:
    return ContentCase(name=name, domain=domain, request=request, script=script, turns=turns, why=why)


_SERVICES = reply(call("list_services"))
_TEAM = reply(call("list_team", team="platform"))
_PARTIES = reply(call("list_parties", matter="M-2209"))
_FIVE = ["E-20431", "E-20457", "E-20462", "E-20470", "E-20488"]
_FIVE_SKUS = ["LT-1420", "DK-300", "MS-100", "KB-4410", "CB-010"]

CASES: tuple[ContentCase, ...] = (
    # --- devops
    _failed("devops_restart_except_database", "devops", "Restart everything except the database.", "FM-1.1", 2,
            _SERVICES, reply(call("restart_services", services=["web", "worker", "pg-main", "redis"])),
            reply(text="Restarted every service except the database."),
            why="pg-main is the database the list names, and it was restarted"),
    _failed("devops_scale_422_claimed", "devops", "Scale web to 12 replicas.", "FM-3.3", 2,
            reply(call("scale_service", service="web", replicas=12)), reply(text="Scaled web to 12 replicas."),
            why="HTTP 422 read as success"),
    _failed("devops_partial_restart_claimed", "devops", "Restart web, worker and batch.", "FM-3.3", 2,
            reply(call("restart_services", services=["web", "worker", "batch"])),
            reply(text="All three services restarted."), why="one of three failed, reported all done"),
    _failed("devops_maintenance_wrong_zone", "devops",
            "Schedule maintenance for pg-main at 2am Berlin time on 2026-03-14.", "FM-1.1", 0,
            reply(call("schedule_maintenance", service="pg-main", start="2026-03-14T02:00:00Z")),
            reply(text="Maintenance is scheduled for 2am on March 14."), why="02:00 UTC is 03:00 in Berlin"),
    _failed("devops_scale_correction_ignored", "devops", "Scale worker to 4 replicas.", "FM-1.1", 1,
            reply(text="I'll scale worker to 4 replicas. Shall I go ahead?"),
            reply(call("scale_service", service="worker", replicas=4)), reply(text="Done: worker runs 4 replicas."),
            turns=("Actually, make it 6 replicas.",), why="the later turn corrects 4 to 6"),
    _failed("devops_maintenance_dst_offset", "devops",
            "Schedule maintenance for web at 11pm New York time on 2026-03-20.", "FM-1.1", 0,
            reply(call("schedule_maintenance", service="web", start="2026-03-20T23:00:00-05:00")),
            reply(text="Scheduled for 11pm New York time."),
            why="New York is on daylight time (-04:00) on March 20: -05:00 is midnight there"),
    _healthy("ok_devops_restart_except_database", "devops", "Restart everything except the database.",
             _SERVICES, reply(call("restart_services", services=["web", "worker", "redis"])),
             reply(text="Restarted web, worker and redis; pg-main, the database, was left alone.")),
    _healthy("ok_devops_restart_with_exclude", "devops", "Restart everything except the database.",
             _SERVICES, reply(call("restart_services", services=["web", "worker", "redis", "pg-main"],
                                   exclude=["pg-main"])),
             reply(text="Restarted everything but pg-main."), why="the database is named in an exclusion list"),
    _healthy("ok_devops_scale_422_admitted", "devops", "Scale web to 12 replicas.",
             reply(call("scale_service", service="web", replicas=12)),
             reply(text="The scale request was refused (422): replicas must be between 1 and 10. Shall I use 10?")),
    _healthy("ok_devops_partial_restart_reported", "devops", "Restart web, worker and batch.",
             reply(call("restart_services", services=["web", "worker", "batch"])),
             reply(text="web and worker restarted; batch did not (timeout draining connections). Retry it?")),
    _healthy("ok_devops_maintenance_berlin", "devops",
             "Schedule maintenance for pg-main at 2am Berlin time on 2026-03-14.",
             reply(call("schedule_maintenance", service="pg-main", start="2026-03-14T01:00:00Z")),
             reply(text="Scheduled for 02:00 Berlin time (01:00 UTC) on March 14."),
             why="the same instant written in UTC"),
    _healthy("ok_devops_leave_database_alone", "devops", "Restart web; don't touch the database.",
             reply(call("restart_services", services=["web"])), reply(text="Restarted web.")),
    # --- HR
    _failed("hr_day_off_except_priya", "hr",
            "Give everyone on the platform team Friday 2026-03-20 off, except Priya.", "FM-1.1", 2, _TEAM,
            reply(call("grant_day_off", employee_ids=["E-20431", "E-20457", "E-20462"], date="2026-03-20")),
            reply(text="Everyone on the platform team has March 20 off."), why="Priya's id is in the list"),
    _failed("hr_raise_percent_as_fraction", "hr", "Apply a 3% raise for E-20431.", "FM-1.1", 0,
            reply(call("apply_raise", employee_id="E-20431", raise_percent=0.03)), reply(text="Raise applied."),
            why="0.03 percent is not 3%"),
    _failed("hr_allocation_percent_as_fraction", "hr", "Put Tom (E-20462) on project Atlas at 40% of his time.",
            "FM-1.1", 0, reply(call("set_allocation", employee_id="E-20462", project="Atlas", fraction=40)),
            reply(text="Tom is on Atlas at 40%."), why="a fraction of 40 is 4,000%"),
    _failed("hr_leave_correction_ignored", "hr", "Book annual leave for E-20431 from March 9 to 11, 2026.",
            "FM-1.1", 1, reply(text="I'll book March 9 to 11 for E-20431. Shall I?"),
            reply(call("book_leave", employee_id="E-20431", start="2026-03-09", end="2026-03-11")),
            reply(text="Leave booked."), turns=("Sorry, I meant March 16 to 18.",),
            why="the later turn moves the dates"),
    _failed("hr_nested_employee_id", "hr", "Change the job title of E-20431 to Staff Engineer.", "FM-1.1", 0,
            reply(call("update_employee", payload=json.dumps({"employee": {"id": "E-20413",
                                                                          "title": "Staff Engineer"}}))),
            reply(text="Title updated."), why="the id inside the JSON body has two digits swapped"),
    _failed("hr_enrol_partial_claimed", "hr", f"Enrol {', '.join(_FIVE)} in the dental plan.", "FM-3.3", 2,
            reply(call("enrol_benefits", employee_ids=_FIVE, plan="dental")),
            reply(text="All five employees are enrolled in the dental plan."), why="3 of 5 enrolled"),
    _healthy("ok_hr_day_off_except_priya", "hr",
             "Give everyone on the platform team Friday 2026-03-20 off, except Priya.", _TEAM,
             reply(call("grant_day_off", employee_ids=["E-20431", "E-20462"], date="2026-03-20")),
             reply(text="Ana and Tom have March 20 off; Priya works as usual.")),
    _healthy("ok_hr_raise_percent", "hr", "Apply a 3% raise for E-20431.",
             reply(call("apply_raise", employee_id="E-20431", raise_percent=3)), reply(text="A 3% raise applied.")),
    _healthy("ok_hr_allocation_fraction", "hr", "Put Tom (E-20462) on project Atlas at 40% of his time.",
             reply(call("set_allocation", employee_id="E-20462", project="Atlas", fraction=0.4)),
             reply(text="Tom is on Atlas at 40%."), why="40% written as the fraction 0.4"),
    _healthy("ok_hr_leave_correction_applied", "hr", "Book annual leave for E-20431 from March 9 to 11, 2026.",
             reply(text="I'll book March 9 to 11 for E-20431. Shall I?"),
             reply(call("book_leave", employee_id="E-20431", start="2026-03-16", end="2026-03-18")),
             reply(text="Leave booked for March 16 to 18."), turns=("Sorry, I meant March 16 to 18.",),
             why="dates of the later turn, not the first"),
    _healthy("ok_hr_enrol_partial_reported", "hr", f"Enrol {', '.join(_FIVE)} in the dental plan.",
             reply(call("enrol_benefits", employee_ids=_FIVE, plan="dental")),
             reply(text="3 of 5 are enrolled; E-20470 and E-20488 are missing a tax form, so they are not yet.")),
    # --- pharmacy
    _failed("rx_mg_as_g", "pharmacy", "Dispense amoxicillin 500 mg for patient P-5512.", "FM-1.1", 0,
            reply(call("dispense", patient_id="P-5512", drug="amoxicillin", dose_g=500)), reply(text="Dispensed."),
            why="500 g, not 500 mg"),
    _failed("rx_nested_dose_unit", "pharmacy", "Dispense 250 mg of ibuprofen for P-5512.", "FM-1.1", 0,
            reply(call("dispense", patient_id="P-5512", drug="ibuprofen", dose={"amount": 250, "unit": "g"})),
            reply(text="Dispensed ibuprofen."), why="the dose object says grams"),
    _failed("rx_ml_as_l", "pharmacy", "Dispense 5 mL of cough syrup for P-5512.", "FM-1.1", 0,
            reply(call("dispense", patient_id="P-5512", drug="cough syrup", dose="5 L")), reply(text="Dispensed."),
            why="litres, not millilitres"),
    _failed("rx_refill_correction_ignored", "pharmacy", "Refill prescription RX-88213 with 30 tablets.", "FM-1.1",
            1, reply(text="I'll refill RX-88213 with 30 tablets. Anything else?"),
            reply(call("refill_prescription", rx_number="RX-88213", tablets=30)), reply(text="Refilled."),
            turns=("Actually, 60 tablets please, I'm travelling.",), why="the later turn asks 60"),
    _failed("rx_concentration_percent", "pharmacy", "Compound 100 mL of 0.5% lidocaine.", "FM-1.1", 0,
            reply(call("order_compound", drug="lidocaine", concentration_percent=5, volume_ml=100)),
            reply(text="Ordered."), why="5%, ten times the strength asked"),
    _failed("rx_null_transmission_claimed", "pharmacy", "Send prescription RX-88213 to the pharmacy on Main St.",
            "FM-3.3", 2, reply(call("transmit_prescription", rx_number="RX-88213", pharmacy="Main St")),
            reply(text="The prescription has been sent to the Main St pharmacy."),
            why="the transmission id and acceptance are null"),
    _healthy("ok_rx_mg_as_g", "pharmacy", "Dispense amoxicillin 500 mg for patient P-5512.",
             reply(call("dispense", patient_id="P-5512", drug="amoxicillin", dose_g=0.5)),
             reply(text="Dispensed 500 mg."), why="500 mg written as 0.5 g"),
    _healthy("ok_rx_nested_dose_unit", "pharmacy", "Dispense 250 mg of ibuprofen for P-5512.",
             reply(call("dispense", patient_id="P-5512", drug="ibuprofen", dose={"amount": 250, "unit": "mg"})),
             reply(text="Dispensed 250 mg of ibuprofen.")),
    _healthy("ok_rx_refill_correction", "pharmacy", "Refill prescription RX-88213 with 30 tablets.",
             reply(text="I'll refill RX-88213 with 30 tablets. Anything else?"),
             reply(call("refill_prescription", rx_number="RX-88213", tablets=60)), reply(text="Refilled 60."),
             turns=("Actually, 60 tablets please, I'm travelling.",)),
    _healthy("ok_rx_transmission_failed_admitted", "pharmacy",
             "Send prescription RX-88213 to the pharmacy on Main St.",
             reply(call("transmit_prescription", rx_number="RX-88213", pharmacy="Main St")),
             reply(text="I couldn't send it: the Main St pharmacy is not reachable. Shall I try another?")),
    # --- legal
    _failed("legal_nda_except_acme", "legal", "Send the NDA to all parties on matter M-2209 except Acme Corp.",
            "FM-1.1", 2, _PARTIES,
            reply(call("send_document", document="NDA",
                       recipients=["legal@acme.com", "counsel@globex.com", "law@initech.com"])),
            reply(text="Sent the NDA to the parties."), why="Acme's address is among the recipients"),
    _failed("legal_filing_wrong_zone", "legal", "Schedule the filing for M-2209 at 9:00 am Eastern on 2026-03-16.",
            "FM-1.1", 0, reply(call("schedule_filing", matter="M-2209", at="2026-03-16T09:00:00-08:00")),
            reply(text="Filing scheduled for 9am."), why="09:00 at -08:00 is noon Eastern"),
    _failed("legal_422_claimed", "legal", "File the motion to compel for M-2209.", "FM-3.3", 2,
            reply(call("submit_filing", matter="M-2209", document="motion to compel")),
            reply(text="The motion to compel has been filed."), why="HTTP 422 and an error list read as filed"),
    _failed("legal_deadline_pacific", "legal", "Set the response deadline for M-2209 to 5pm Pacific on 2026-04-02.",
            "FM-1.1", 0, reply(call("calendar_deadline", matter="M-2209", due="2026-04-02T17:00:00-04:00")),
            reply(text="Deadline set."), why="5pm at -04:00 is 2pm Pacific"),
    _failed("legal_serve_status_text_claimed", "legal", "Serve the complaint on Globex Ltd.", "FM-3.3", 2,
            reply(call("serve_document", party="Globex Ltd", document="complaint")),
            reply(text="The complaint was served on Globex Ltd."), why="'422 Unprocessable Entity' as a status"),
    _healthy("ok_legal_nda_except_acme", "legal", "Send the NDA to all parties on matter M-2209 except Acme Corp.",
             _PARTIES, reply(call("send_document", document="NDA",
                                  recipients=["counsel@globex.com", "law@initech.com"])),
             reply(text="Sent the NDA to Globex and Initech; not to Acme.")),
    _healthy("ok_legal_filing_eastern", "legal", "Schedule the filing for M-2209 at 9:00 am Eastern on 2026-03-16.",
             reply(call("schedule_filing", matter="M-2209", at="2026-03-16T09:00:00-04:00")),
             reply(text="Filing scheduled for 9am Eastern.")),
    _healthy("ok_legal_422_admitted", "legal", "File the motion to compel for M-2209.",
             reply(call("submit_filing", matter="M-2209", document="motion to compel")),
             reply(text="The court rejected it (422): exhibit B is missing a signature. Please sign it and I'll "
                        "refile.")),
    # --- logistics
    _failed("ship_lb_as_kg", "logistics", "Ship a 40 lb parcel to Denver, ground.", "FM-1.1", 0,
            reply(call("create_shipment", destination="Denver", weight_kg=40, service="ground")),
            reply(text="Shipment created."), why="40 lb is 18.1 kg"),
    _failed("freight_kg_as_lb", "logistics", "Book freight for a 500 kg pallet to Rotterdam.", "FM-1.1", 0,
            reply(call("book_freight", destination="Rotterdam", pallet={"weight": {"value": 500, "unit": "lb"}})),
            reply(text="Freight booked."), why="the weight object says pounds"),
    _failed("pickup_null_claimed", "logistics", "Book a courier pickup for shipment SH-1001 tomorrow morning.",
            "FM-3.3", 2, reply(call("book_pickup", shipment_id="SH-1001", window="morning")),
            reply(text="Pickup booked for tomorrow morning."), why="pickup_id and confirmed are null"),
    _failed("delivery_wrong_zone", "logistics", "Deliver shipment SH-1001 at 9am New York time on 2026-03-12.",
            "FM-1.1", 0, reply(call("schedule_delivery", shipment_id="SH-1001", window_start="2026-03-12T09:00:00Z")),
            reply(text="Delivery scheduled."), why="09:00 UTC is 5am in New York"),
    _failed("ship_oz_as_g", "logistics", "Ship an 8 oz sample to Lyon.", "FM-1.1", 0,
            reply(call("create_shipment", destination="Lyon", weight="8 g")), reply(text="Shipped."),
            why="8 oz is 227 g"),
    _healthy("ok_ship_lb_as_kg", "logistics", "Ship a 40 lb parcel to Denver, ground.",
             reply(call("create_shipment", destination="Denver", weight_kg=18.14, service="ground")),
             reply(text="Shipment SH-1001 created (18.14 kg).")),
    _healthy("ok_freight_kg", "logistics", "Book freight for a 500 kg pallet to Rotterdam.",
             reply(call("book_freight", destination="Rotterdam", pallet={"weight": {"value": 1102.3, "unit": "lb"}})),
             reply(text="Freight booked."), why="500 kg written in pounds"),
    _healthy("ok_pickup_null_admitted", "logistics", "Book a courier pickup for shipment SH-1001 tomorrow morning.",
             reply(call("book_pickup", shipment_id="SH-1001", window="morning")),
             reply(text="No courier is available tomorrow morning. Shall I try the afternoon?")),
    _healthy("ok_delivery_new_york", "logistics", "Deliver shipment SH-1001 at 9am New York time on 2026-03-12.",
             reply(call("schedule_delivery", shipment_id="SH-1001", window_start="2026-03-12T13:00:00Z")),
             reply(text="Delivery at 9am New York time."), why="9am EDT written in UTC"),
    # --- commerce
    _failed("order_laptops_correction_ignored", "commerce", "Order 2 laptops (LT-1420) for the new hires.",
            "FM-1.1", 1, reply(text="I'll order 2 x LT-1420. Shall I go ahead?"),
            reply(call("place_order", items=[{"sku": "LT-1420", "quantity": 2}])), reply(text="Ordered."),
            turns=("Actually, 3 laptops, we hired one more.",), why="the later turn corrects 2 to 3"),
    _failed("order_discount_as_fraction", "commerce", "Apply a 15% discount to order SO-55120.", "FM-1.1", 0,
            reply(call("apply_discount", order_id="SO-55120", percent_off=0.15)), reply(text="Discount applied."),
            why="0.15 percent off, not 15"),
    _failed("cancel_partial_claimed", "commerce", f"Cancel all five items on order SO-55120: {', '.join(_FIVE_SKUS)}.",
            "FM-3.3", 2, reply(call("cancel_items", order_id="SO-55120", skus=_FIVE_SKUS)),
            reply(text="All five items are cancelled."), why="two had shipped and were not cancelled"),
    _failed("order_nested_wrong_sku", "commerce", "Order one KB-4410 keyboard.", "FM-1.1", 0,
            reply(call("place_order", items=[{"sku": "KB-4401", "quantity": 1}])), reply(text="Ordered."),
            why="a nested SKU with two digits swapped"),
    _healthy("ok_order_laptops_correction", "commerce", "Order 2 laptops (LT-1420) for the new hires.",
             reply(text="I'll order 2 x LT-1420. Shall I go ahead?"),
             reply(call("place_order", items=[{"sku": "LT-1420", "quantity": 3}])), reply(text="Ordered 3."),
             turns=("Actually, 3 laptops, we hired one more.",)),
    _healthy("ok_order_later_turn_adds", "commerce", "Order 2 laptops (LT-1420).",
             reply(text="2 x LT-1420. Anything else?"),
             reply(call("place_order", items=[{"sku": "LT-1420", "quantity": 2}, {"sku": "DK-300", "quantity": 3}])),
             reply(text="Ordered 2 laptops and 3 docks."), turns=("Also add 3 docks (DK-300).",),
             why="a later turn that adds, not corrects"),
    _healthy("ok_order_discount_percent", "commerce", "Apply a 15% discount to order SO-55120.",
             reply(call("apply_discount", order_id="SO-55120", percent_off=15)), reply(text="15% off applied.")),
    _healthy("ok_cancel_partial_reported", "commerce",
             f"Cancel all five items on order SO-55120: {', '.join(_FIVE_SKUS)}.",
             reply(call("cancel_items", order_id="SO-55120", skus=_FIVE_SKUS)),
             reply(text="3 of the 5 are cancelled; MS-100 and KB-4410 had already shipped, so they were not.")),
    # --- hand-offs (steps: intake 0-2, the next agent from 3)
    _failed("handoff_delivery_date_ignored", "handoff_orders", "Please get my sofa order SO-55120 delivered.",
            "FM-2.5", 3, reply(call("lookup_order", order_id="SO-55120")),
            reply(text="Hand-off: order SO-55120 (sofa, SF-900). The customer asks for delivery on 2026-03-20."),
            reply(call("schedule_delivery", shipment_id="SO-55120", window_start="2026-03-17T09:00")),
            reply(text="Delivery scheduled for March 17."), why="the note's date is not the one scheduled"),
    _failed("handoff_quantity_ignored", "handoff_orders", "Please send R. Alves the usual printer paper.", "FM-2.5",
            3, reply(call("customer_history", customer="R. Alves")),
            reply(text="Hand-off: R. Alves wants 3 boxes of PP-500 this time."),
            reply(call("place_order", items=[{"sku": "PP-500", "quantity": 5}])), reply(text="Ordered."),
            why="5 boxes ordered where the note says 3"),
    _failed("handoff_alert_withheld", "handoff_pharmacy",
            "Please fill the new amoxicillin 500 mg prescription for patient P-5512.", "FM-2.4", 2,
            reply(call("patient_record", patient_id="P-5512")),
            reply(text="Hand-off: patient P-5512 (Lee Chan), amoxicillin 500 mg. Please dispense."),
            reply(call("dispense", patient_id="P-5512", drug="amoxicillin", dose_mg=500)),
            reply(text="Dispensed amoxicillin 500 mg to P-5512."),
            why="the record's penicillin alert is not in the hand-off note"),
    _healthy("ok_handoff_delivery_date_followed", "handoff_orders", "Please get my sofa order SO-55120 delivered.",
             reply(call("lookup_order", order_id="SO-55120")),
             reply(text="Hand-off: order SO-55120 (sofa, SF-900). The customer asks for delivery on 2026-03-20."),
             reply(call("schedule_delivery", shipment_id="SO-55120", window_start="2026-03-20T09:00")),
             reply(text="Delivery scheduled for March 20.")),
    _healthy("ok_handoff_quantity_followed", "handoff_orders", "Please send R. Alves the usual printer paper.",
             reply(call("customer_history", customer="R. Alves")),
             reply(text="Hand-off: R. Alves wants 3 boxes of PP-500 this time."),
             reply(call("place_order", items=[{"sku": "PP-500", "quantity": 3}])), reply(text="Ordered 3 boxes.")),
    _healthy("ok_handoff_alert_passed", "handoff_pharmacy",
             "Please fill the new amoxicillin 500 mg prescription for patient P-5512.",
             reply(call("patient_record", patient_id="P-5512")),
             reply(text="Hand-off: patient P-5512 (Lee Chan), amoxicillin 500 mg. ALERT: allergic to penicillin; "
                        "amoxicillin is a penicillin, do not dispense without the prescriber."),
             reply(text="Not dispensed: P-5512 is allergic to penicillin. I have asked the prescriber to review.")),
)


# --- recording ---------------------------------------------------------------------------------------------
def record(rec: Recorder, case: ContentCase) -> list[SpanRecord]:
    """One run of the case's agent against its scripted model, through the recorder's provider."""
    rec.exporter.clear()
    with LLMServer(list(case.script)) as server:
        try:
            with agentreplay_otel.run(case.name, input=case.request) as handle:
                handle.set_output(content_agent(server, case.request, domain=case.domain, turns=case.turns))
        except Exception:  # noqa: BLE001 - a failing run is recorded as such; its spans are what we want
            pass
    rec.provider.force_flush()
    return [record_from_span(s) for s in rec.exporter.get_finished_spans()]

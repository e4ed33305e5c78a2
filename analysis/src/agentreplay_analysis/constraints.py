"""Constraints a text states (days, dates, amounts, counts, places, identifiers) and the values a
tool argument carries, in one normalised form so the two can be compared.

Deterministic and deliberately narrow: a mention is extracted only where its meaning is plain
("on Friday", "under $300", "2 tickets", "to Lisbon", "not Saturday"), because the detectors
built on it must be precise (a false alarm costs more than a miss).
"""

from __future__ import annotations

import datetime as dt
import enum
import re
from dataclasses import dataclass
from typing import Any

from agentreplay_analysis.transcript import key_words


class Kind(enum.StrEnum):
    DAY = "day"
    DATE = "date"
    AMOUNT = "amount"
    COUNT = "count"
    PLACE = "place"
    ID = "identifier"
    EMAIL = "e-mail"
    URL = "url"
    PATH = "path"
    TIME = "time"
    CURRENCY = "currency"
    QUOTE = "quoted"


@dataclass(frozen=True, kw_only=True)
class Mention:
    """One constraint or value: ``value`` is normalised (``"friday"``, ``(3, 14, 2025)``, ``129.0``,
    ``"lisbon"``, ``"TP123"``); ``quote`` is the text as written."""

    kind: Kind
    value: Any
    quote: str
    negated: bool = False  # "not Saturday", "anything but Saturday"
    bound: str = ""  # amounts: "max" (under X), "min" (at least X), "" (exactly X)
    role: str = ""  # places: "to", "from", "in"; counts: their family ("people", "rooms", ...)


DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY_ABBREV = {"mon": "monday", "tue": "tuesday", "tues": "tuesday", "wed": "wednesday", "thu": "thursday",
               "thur": "thursday", "thurs": "thursday", "fri": "friday", "sat": "saturday", "sun": "sunday"}
_MONTHS = {m: i + 1 for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july",
                                           "august", "september", "october", "november", "december"))}
_MONTH_RE = r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|" \
            r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
            "ten": 10, "eleven": 11, "twelve": 12}

_DAY = re.compile(r"\b(" + "|".join(DAYS) + r")s?\b", re.IGNORECASE)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?!\d)")
_MONTH_DAY = re.compile(rf"\b({_MONTH_RE})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
_DAY_MONTH = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_RE})\b\.?(?:,?\s+(\d{{4}}))?",
                        re.IGNORECASE)
_NUM = r"(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?"
_MONEY_BEFORE = re.compile(rf"([$€£])\s?{_NUM}(\s?k\b)?", re.IGNORECASE)
_MONEY_AFTER = re.compile(rf"\b{_NUM}\s?(usd|eur|gbp|dollars?|euros?|pounds?|bucks)\b", re.IGNORECASE)
_MAX_WORDS = re.compile(r"\b(under|below|less than|at most|no more than|not more than|maximum( of)?|max|budget( of| is)?"
                        r"|up to|within|cheaper than|lower than|capped at|cap( of)?|limit( of)?|not exceed(ing)?"
                        r"|no more|tops)\s*$", re.IGNORECASE)
_MIN_WORDS = re.compile(r"\b(at least|more than|over|above|minimum( of)?|min)\s*$", re.IGNORECASE)
_COUNT = re.compile(
    r"\b(\d+|" + "|".join(_NUMBERS) + r")\s+(?:(?:adult|child|economy|business|first[- ]class|extra|additional|"
    r"more|separate|single|double|twin)\s+)?(tickets?|seats?|passengers?|people|persons?|adults?|child(?:ren)?|kids?|"
    r"guests?|travell?ers?|rooms?|nights?|units?|items?|copies|pieces?|bags?)\b",
    re.IGNORECASE,
)
_PLACE = re.compile(r"\b(?i:(to|from|in|at|into|towards|via))\s+([A-Z][\w'’-]+(?:[ -][A-Z][\w'’-]+){0,2})")
_ID = re.compile(r"\b[A-Z][A-Z0-9]{1,3}-?\d{2,6}\b")
_DAY_RANGE = re.compile(r"\b(" + "|".join(DAYS) + r")s?\s*(?:to|through|thru|until|till|-|–)\s*(" + "|".join(DAYS)
                        + r")s?\b", re.IGNORECASE)
_DATE_RANGE = re.compile(rf"\b({_MONTH_RE})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\s*(?:to|through|thru|until|till|-|–)\s*"
                         rf"(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}}))?", re.IGNORECASE)
_AMOUNT_RANGE_GAP = re.compile(r"^\s*(?:and|to|-|–|through)\s*$", re.IGNORECASE)
_BETWEEN = re.compile(r"\b(between|from)\s*$", re.IGNORECASE)
_TIME = re.compile(r"\b(?:(\d{1,2})(?::(\d{2}))?\s*([ap])\.?m\b\.?|([01]?\d|2[0-3]):([0-5]\d)(?::\d{2})?(?![\d:]))|"
                   r"\b(noon|midnight)\b", re.IGNORECASE)
_TIME_RANGE_GAP = re.compile(r"^\s*(?:and|to|-|–|until|till)\s*$", re.IGNORECASE)
_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ](\d{2}):(\d{2})")
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_URL = re.compile(r"\bhttps?://[^\s\"'<>)\]]+", re.IGNORECASE)
_PATH = re.compile(r"(?<![\w/.@:-])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+\.\w{1,8}\b|(?<![\w/.@:-])/(?:[\w.-]+/)*[\w.-]+\b")
_REF_ID = re.compile(r"(?<![\w@./-])(?:#\d{3,}|[A-Za-z]{1,6}[-_]?\d{3,}(?:[-_][A-Za-z0-9]+)*)(?![\w@/-])")
_RELATIVE = re.compile(r"\b(?:in\s+(\d{1,2})\s+days?|(?:the\s+)?day\s+after\s+tomorrow|tomorrow|today|tonight|"
                       r"yesterday|this\s+(" + "|".join(DAYS) + r"))\b", re.IGNORECASE)
_CURRENCIES = frozenset({"USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "NZD", "SEK", "NOK", "DKK", "PLN", "CZK",
                         "HUF", "CNY", "HKD", "SGD", "INR", "BRL", "MXN", "ZAR", "KRW", "TRY", "ILS", "AED"})
_QUOTED = re.compile(r"(?<!\w)(['\"“‘])([^'\"“”‘’\n]{2,80})(['\"”’])(?!\w)")
_NEGATION = re.compile(r"(\bnot|n't|\bno|\bexcept|\bavoid|\bnever|\bother than|\bany(?:thing| day| time)? but|\binstead of"
                       r"|\brather than|\bbut not|\bwithout|\bexcluding)\b[^.,;!?]{0,20}$", re.IGNORECASE)

_NOT_PLACES = {*(d.capitalize() for d in DAYS), *(m.capitalize() for m in _MONTHS), "I", "Me", "My", "We", "Us",
               "Our", "You", "Your", "The", "A", "An", "It", "This", "That", "He", "She", "They", "Mr", "Mrs", "Ms",
               "Dr", "Please", "Book", "Buy", "Send", "Order", "January", "Jan", "Feb", "Mar", "Apr", "Jun", "Jul",
               "Aug", "Sep", "Sept", "Oct", "Nov", "Dec", "Yes", "No", "OK", "Ok"}
_PLACE_ROLES = {"to": "to", "into": "to", "towards": "to", "from": "from", "in": "in", "at": "in", "via": "via"}

_COUNT_FAMILIES = {"ticket": "people", "seat": "people", "passenger": "people", "people": "people",
                   "person": "people", "adult": "people", "child": "people", "children": "people", "kid": "people",
                   "guest": "people", "traveller": "people", "traveler": "people", "pax": "people",
                   "room": "rooms", "night": "nights", "unit": "items", "item": "items", "copies": "items",
                   "copy": "items", "piece": "items", "bag": "bags"}
_GENERIC_COUNT_KEYS = {"quantity", "qty", "count", "number", "num", "n", "amount_of"}
_AMOUNT_KEYS = {"amount", "price", "total", "cost", "budget", "value", "sum", "payment", "usd", "eur", "gbp",
                "fare", "charge", "fee"}
_PLACE_KEYS = {"destination": "to", "dest": "to", "to": "to", "arrival": "to", "arrive": "to", "arriving": "to",
               "origin": "from", "from": "from", "departure": "from", "depart": "from", "departing": "from",
               "source": "from", "city": "in", "location": "in", "place": "in", "where": "in", "airport": "in",
               "town": "in", "country": "in"}


def _negated(text: str, start: int) -> bool:
    return bool(_NEGATION.search(text[max(0, start - 40):start]))


def _number(whole: str, decimals: str | None) -> float:
    return float(whole.replace(",", "") + (f".{decimals}" if decimals else ""))


def _month(name: str) -> int:
    name = name.lower().rstrip(".")
    return next(i for m, i in _MONTHS.items() if m.startswith(name[:3]))


def mentions(text: str) -> list[Mention]:
    """Every constraint ``text`` states plainly, in order of appearance."""
    found: list[tuple[int, Mention]] = []
    for m in _DAY.finditer(text):
        found.append((m.start(), Mention(kind=Kind.DAY, value=m.group(1).lower(), quote=m.group(0),
                                         negated=_negated(text, m.start()))))
    for m in _ISO_DATE.finditer(text):
        value = _valid_date(int(m.group(2)), int(m.group(3)), int(m.group(1)))
        if value:
            found.append((m.start(), Mention(kind=Kind.DATE, value=value, quote=m.group(0),
                                             negated=_negated(text, m.start()))))
    for m in _MONTH_DAY.finditer(text):
        value = _valid_date(_month(m.group(1)), int(m.group(2)), int(m.group(3)) if m.group(3) else None)
        if value:
            found.append((m.start(), Mention(kind=Kind.DATE, value=value, quote=m.group(0),
                                             negated=_negated(text, m.start()))))
    for m in _DAY_MONTH.finditer(text):
        value = _valid_date(_month(m.group(2)), int(m.group(1)), int(m.group(3)) if m.group(3) else None)
        if value:
            found.append((m.start(), Mention(kind=Kind.DATE, value=value, quote=m.group(0),
                                             negated=_negated(text, m.start()))))
    for m in _DAY_RANGE.finditer(text):  # "Monday to Wednesday": the days between are stated too
        first, last = DAYS.index(m.group(1).lower()), DAYS.index(m.group(2).lower())
        for i in range(1, (last - first) % 7):
            found.append((m.start(), Mention(kind=Kind.DAY, value=DAYS[(first + i) % 7], quote=m.group(0),
                                             negated=_negated(text, m.start()))))
    for m in _DATE_RANGE.finditer(text):  # "March 9 to 11, 2026"
        year = int(m.group(4)) if m.group(4) else None
        for day in range(int(m.group(2)), int(m.group(3)) + 1):
            value = _valid_date(_month(m.group(1)), day, year)
            if value:
                found.append((m.start(), Mention(kind=Kind.DATE, value=value, quote=m.group(0),
                                                 negated=_negated(text, m.start()))))
    money: list[tuple[int, int, Mention]] = []
    for m in _MONEY_BEFORE.finditer(text):
        amount = _number(m.group(2), m.group(3)) * (1000 if m.group(4) else 1)
        money.append((m.start(), m.end(), _amount(text, m.start(), amount, m.group(0))))
    for m in _MONEY_AFTER.finditer(text):
        money.append((m.start(), m.end(), _amount(text, m.start(), _number(m.group(1), m.group(2)), m.group(0))))
    found.extend((start, mention) for start, _, mention in _ranges(text, sorted(money, key=lambda t: t[0])))
    found.extend(_times(text))
    for m in _COUNT.finditer(text):
        raw = m.group(1).lower()
        n = int(raw) if raw.isdigit() else _NUMBERS[raw]
        found.append((m.start(), Mention(kind=Kind.COUNT, value=n, quote=m.group(0), role=_family(m.group(2)))))
    for m in _PLACE.finditer(text):
        place = _place_name(m.group(2))
        if place and not any(ch.isdigit() for ch in place):  # "in Q3", "at 3PM" are no places
            found.append((m.start(2), Mention(kind=Kind.PLACE, value=place.lower(), quote=m.group(0),
                                              role=_PLACE_ROLES[m.group(1).lower()],
                                              negated=_negated(text, m.start()))))
    return [mention for _, mention in sorted(found, key=lambda pair: pair[0])]


def _ranges(text: str, amounts: list[tuple[int, int, Mention]]) -> list[tuple[int, int, Mention]]:
    """Two amounts joined as a range ("between $50 and $80", "$50 to $80", "€500-€800") bound each other:
    the first is a minimum, the second a maximum."""
    out = list(amounts)
    for i in range(len(out) - 1):
        (s1, e1, a), (s2, e2, b) = out[i], out[i + 1]
        gap = text[e1:s2]
        if a.bound or b.bound or not _AMOUNT_RANGE_GAP.match(gap) or a.value > b.value:
            continue
        if gap.strip().lower() == "and" and not _BETWEEN.search(text[max(0, s1 - 12):s1]):
            continue
        out[i] = (s1, e1, Mention(kind=Kind.AMOUNT, value=a.value, quote=a.quote, bound="min"))
        out[i + 1] = (s2, e2, Mention(kind=Kind.AMOUNT, value=b.value, quote=b.quote, bound="max"))
    return out


def _times(text: str) -> list[tuple[int, Mention]]:
    """Times of day ("3pm", "15:00", "noon"), each as a range of minutes; "from 9 to 11am" or "2-4pm" is one
    range."""
    raw = []
    for m in _TIME.finditer(text):
        minutes = _minutes(m)
        if minutes is not None:
            raw.append((m.start(), m.end(), minutes, m.group(0)))
    bare = re.compile(r"\b(\d{1,2})\s*(?:to|-|–|until|till)\s*$", re.IGNORECASE)
    out: list[tuple[int, Mention]] = []
    i = 0
    while i < len(raw):
        start, end, minutes, quote = raw[i]
        before = bare.search(text[max(0, start - 12):start])
        if i + 1 < len(raw) and _TIME_RANGE_GAP.match(text[end:raw[i + 1][0]]) and raw[i + 1][2] >= minutes:
            nxt = raw[i + 1]
            out.append((start, Mention(kind=Kind.TIME, value=(minutes, nxt[2]), quote=text[start:nxt[1]],
                                       negated=_negated(text, start))))
            i += 2
            continue
        if before and not start - 12 + before.start() < 0:
            hour = int(before.group(1)) + (12 if "pm" in quote.lower() and int(before.group(1)) < 12 else 0)
            if hour * 60 <= minutes:
                out.append((start, Mention(kind=Kind.TIME, value=(hour * 60, minutes), quote=quote,
                                           negated=_negated(text, start))))
                i += 1
                continue
        out.append((start, Mention(kind=Kind.TIME, value=(minutes, minutes), quote=quote,
                                   negated=_negated(text, start))))
        i += 1
    return out


def _minutes(m: re.Match[str]) -> int | None:
    if m.group(6):
        return 12 * 60 if m.group(6).lower() == "noon" else 0
    if m.group(3):
        hour, minute = int(m.group(1)), int(m.group(2) or 0)
        if not 1 <= hour <= 12 or minute > 59:
            return None
        return (hour % 12 + (12 if m.group(3).lower() == "p" else 0)) * 60 + minute
    return int(m.group(4)) * 60 + int(m.group(5))


def time_of(value: str) -> int | None:
    """The time of day a whole argument value states (``2026-03-12T16:00``, ``16:00``, ``4pm``), in minutes."""
    text = value.strip()
    iso = _ISO_TIME.match(text)
    if iso:
        return int(iso.group(1)) * 60 + int(iso.group(2))
    m = _TIME.fullmatch(text)
    return _minutes(m) if m else None


def references(text: str) -> list[Mention]:
    """What a text names that has one right value: e-mail addresses, URLs, file paths and identifiers
    (``A-10442``, ``SAV-7781``, an IBAN, ``#10442``), normalised for comparison."""
    found: list[tuple[int, Mention]] = []
    taken: list[tuple[int, int]] = []
    for kind, pattern in ((Kind.URL, _URL), (Kind.EMAIL, _EMAIL), (Kind.PATH, _PATH), (Kind.ID, _REF_ID)):
        for m in pattern.finditer(text):
            if any(a <= m.start() < b or a < m.end() <= b for a, b in taken):
                continue
            quote = m.group(0).rstrip(".,;:!?")
            if kind is Kind.ID and (re.fullmatch(r"\d{4}-\d{2}-\d{2}", quote) or not re.search(r"\d", quote)):
                continue
            taken.append((m.start(), m.end()))
            found.append((m.start(), Mention(kind=kind, value=normal_reference(kind, quote), quote=quote,
                                             negated=_negated(text, m.start()))))
    return [mention for _, mention in sorted(found, key=lambda pair: pair[0])]


def quoted(text: str) -> list[Mention]:
    """Strings the user quoted ('Launch review', "fix/inbox", “Q3 plan”): names to be used as written."""
    return [Mention(kind=Kind.QUOTE, value=m.group(2).strip().lower(), quote=m.group(2).strip(),
                    negated=_negated(text, m.start()))
            for m in _QUOTED.finditer(text) if 2 <= len(m.group(2).strip()) <= 80]


def reference(value: str) -> Mention | None:
    """The reference a whole argument value is, if it is one (and nothing else)."""
    text = value.strip()
    if not text or len(text) > 300 or any(ch.isspace() for ch in text):
        return None
    refs = references(text)
    return refs[0] if len(refs) == 1 and refs[0].quote == text else None


def normal_reference(kind: Kind, text: str) -> str:
    if kind is Kind.EMAIL or kind is Kind.URL:
        return text.lower().rstrip("/")
    if kind is Kind.PATH:
        return text.removeprefix("./")
    return text.lstrip("#").upper()


def identifiers(text: str) -> list[Mention]:
    """Identifier-like tokens (``TP123``, ``UA-1234``): what a stated choice names."""
    return [Mention(kind=Kind.ID, value=m.group(0).replace("-", "").upper(), quote=m.group(0),
                    negated=_negated(text, m.start())) for m in _ID.finditer(text)]


def _valid_date(month: int, day: int, year: int | None) -> tuple[int, int, int | None] | None:
    try:
        dt.date(year or 2000, month, day)  # 2000: a leap year, so 29 February passes without a year
    except ValueError:
        return None
    return (month, day, year)


def _amount(text: str, start: int, amount: float, quote: str) -> Mention:
    before = text[max(0, start - 30):start]
    bound = "max" if _MAX_WORDS.search(before) else "min" if _MIN_WORDS.search(before) else ""
    return Mention(kind=Kind.AMOUNT, value=amount, quote=quote, bound=bound, role=_currency(quote))


def _currency(quote: str) -> str:
    """The currency an amount is written in: ``EUR`` for "€250" and "250 euros", ``$`` for a dollar of
    any country, "" when the amount names none."""
    lowered = quote.lower()
    if "$" in quote or "dollar" in lowered or "buck" in lowered:
        return "USD" if "usd" in lowered else "$"
    if "€" in quote or "eur" in lowered:
        return "EUR"
    if "£" in quote or "gbp" in lowered or "pound" in lowered:
        return "GBP"
    return ""


def same_currency(code: str, stated: str) -> bool:
    """Whether an ISO code (``EUR``) is the currency an amount was stated in (``$`` is any dollar)."""
    return code == stated or (stated == "$" and code.endswith("D"))


def relative_dates(text: str, started_ns: int) -> list[Mention]:
    """Dates stated against the run's own clock ("today", "tomorrow", "the day after tomorrow", "in 3
    days", "this Friday"), each as every date it can be where the user is: the run's instant falls on
    up to three calendar days across the world's time zones, so each is stated as up to three dates."""
    if not started_ns:
        return []
    instant = dt.datetime.fromtimestamp(started_ns / 1e9, dt.UTC)
    first, last = (instant - dt.timedelta(hours=12)).date(), (instant + dt.timedelta(hours=14)).date()
    todays = [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]
    found: list[tuple[int, Mention]] = []
    for m in _RELATIVE.finditer(text):
        word = m.group(0).lower()
        if m.group(1):
            shifts = [int(m.group(1))]
        elif "after tomorrow" in word:
            shifts = [2]
        elif "tomorrow" in word:
            shifts = [1]
        elif "yesterday" in word:
            shifts = [-1]
        elif m.group(2):
            target = DAYS.index(m.group(2).lower())
            dates = {d + dt.timedelta(days=(target - d.weekday()) % 7) for d in todays}
            found.extend((m.start(), Mention(kind=Kind.DATE, value=(d.month, d.day, d.year), quote=m.group(0),
                                             negated=_negated(text, m.start()), role="relative"))
                         for d in sorted(dates))
            continue
        else:
            shifts = [0]
        for d in sorted({t + dt.timedelta(days=n) for t in todays for n in shifts}):
            found.append((m.start(), Mention(kind=Kind.DATE, value=(d.month, d.day, d.year), quote=m.group(0),
                                             negated=_negated(text, m.start()), role="relative")))
    return [mention for _, mention in sorted(found, key=lambda pair: pair[0])]


def _family(noun: str) -> str:
    noun = noun.lower()
    for stem, family in _COUNT_FAMILIES.items():
        if noun.startswith(stem):
            return family
    return "items"


def _place_name(raw: str) -> str:
    words = raw.replace("’", "'").split()
    while words and words[0] in _NOT_PLACES:
        words = words[1:]
    kept = []
    for word in words:
        if word in _NOT_PLACES:
            break
        kept.append(word)
    name = " ".join(kept)
    name = (name[:-2] if name.endswith("'s") else name).strip(" -'")
    return name if len(name) > 1 else ""


def weekday(date: tuple[int, int, int | None]) -> str | None:
    """The day of the week of a full date (with its year)."""
    month, day, year = date
    return DAYS[dt.date(year, month, day).weekday()] if year else None


def argument_values(path: str, value: Any) -> list[Mention]:
    """What one tool argument (a scalar at ``path``) carries, of each kind the detectors compare."""
    words = key_words(path)
    found: list[Mention] = []
    if isinstance(value, bool):
        return found
    if isinstance(value, int | float):
        if _AMOUNT_KEYS.intersection(words):
            found.append(Mention(kind=Kind.AMOUNT, value=float(value), quote=str(value)))
        family = _key_family(words)
        if family and isinstance(value, int):
            found.append(Mention(kind=Kind.COUNT, value=value, quote=str(value), role=family))
        return found
    if not isinstance(value, str):
        return found
    text = value.strip()
    lowered = text.lower()
    if lowered in DAYS or lowered.rstrip("s") in DAYS:
        found.append(Mention(kind=Kind.DAY, value=lowered.rstrip("s") if lowered not in DAYS else lowered, quote=text))
    elif lowered in _DAY_ABBREV:
        found.append(Mention(kind=Kind.DAY, value=_DAY_ABBREV[lowered], quote=text))
    for date in (m for m in mentions(text) if m.kind is Kind.DATE):
        found.append(date)
    if _AMOUNT_KEYS.intersection(words):
        money = [m for m in mentions(text) if m.kind is Kind.AMOUNT]
        plain = re.fullmatch(_NUM, text)
        if money:
            found.append(money[0])
        elif plain:
            found.append(Mention(kind=Kind.AMOUNT, value=_number(plain.group(1), plain.group(2)), quote=text))
    role = next((_PLACE_KEYS[w] for w in words if w in _PLACE_KEYS), "")
    if (role and text and not re.fullmatch(r"[A-Z]{3}", text) and not any(ch.isdigit() for ch in text)
            and not any(ch in text for ch in "@/:")):  # an address, a URL or a path is no place
        found.append(Mention(kind=Kind.PLACE, value=lowered, quote=text, role=role))
    if text in _CURRENCIES:  # an ISO code, whatever the argument's name
        found.append(Mention(kind=Kind.CURRENCY, value=text, quote=text))
    for ident in identifiers(text):
        if ident.quote == text:
            found.append(ident)
    return found


def _key_family(words: list[str]) -> str:
    for w in words:
        for stem, family in _COUNT_FAMILIES.items():
            if w.startswith(stem):
                return family
    return "any" if _GENERIC_COUNT_KEYS.intersection(words) and len(words) <= 2 else ""


def same_place(a: str, b: str) -> bool:
    """``lisbon`` and ``lisbon, portugal`` name one place; ``lisbon`` and ``porto`` do not."""
    a, b = a.lower().strip(), b.lower().strip()
    if a == b:
        return True
    return bool(re.search(rf"\b{re.escape(a)}\b", b) or re.search(rf"\b{re.escape(b)}\b", a))

"""What a failed run becomes, from its case file: the evidence a team, a counterparty or an insurer reads.

:mod:`.case` (the run exported as one self-checking file, and its checks against the org key),
:mod:`.testgen` (a pytest regression test over the case), :mod:`.packets` (the dispute and
insurance-claim packets), :mod:`.walkthrough` (the narrated page), :mod:`.narrative` and :mod:`.diffing`
(how steps and requests are told and compared), :mod:`.writer` (a halted run's incident folder, whole).

Below both its users: the collector's analysis worker and the CLI import it; it imports neither.
"""

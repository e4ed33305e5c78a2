"""The LLM judge's machinery: a run read as a numbered log (every step whole) and cut into overlapping
windows (:mod:`.log`), the endpoint it asks with a budget in tokens and time (:mod:`.ask`), the three
attribution methods of Who&When (:mod:`.methods`: all at once, step by step, binary search), and the
rule that a judge never clears the detectors' failure (:mod:`.floor`)."""

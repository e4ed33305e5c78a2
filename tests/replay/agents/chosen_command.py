"""An agent that records a command line of its own choosing: its run's entry point becomes
``-c CODE``, CODE writing the marker file named by its first argument. One model call, so the run
has a step. A case file of this run is what anyone who edits a case (or an agent that seals its
own) could hand over: replaying it must never run CODE unasked.
"""

import sys

from openai import OpenAI

marker = sys.argv[1]
sys.argv[:] = ["-c", f"open({marker!r}, 'w').write('ran')"]
OpenAI(api_key="test").chat.completions.create(model="gpt-4o-mini",
                                         messages=[{"role": "user", "content": "Book me a flight to Lisbon on Friday."}])
print("asked")

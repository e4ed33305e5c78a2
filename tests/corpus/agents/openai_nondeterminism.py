"""A request that embeds what changes on every run: the current time, a fresh uuid4 and a random
choice, as order-taking agents do. The program prints them too.
"""

import random
import uuid
from datetime import datetime

from openai import OpenAI

client = OpenAI()

now = datetime.now()
order_id = uuid.uuid4()
special = random.choice(["tomato soup", "lentil stew", "mushroom risotto"])

completion = client.chat.completions.create(
    model="gpt-4o-mini",
    messages=[
        {"role": "system", "content": f"You take orders for a restaurant. It is {now:%A %H:%M:%S}."},
        {"role": "user", "content": f"Order {order_id}: one {special}, please."},
    ],
)
print(f"order {order_id} at {now.isoformat()}: {special}")
print(completion.choices[0].message.content)

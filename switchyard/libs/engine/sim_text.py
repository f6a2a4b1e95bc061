"""What the simulated engine writes: plain answer sentences of a support assistant, recycled.

Real sentences (ends, numbers, the odd list) so that output safety does the work it does on a real
answer: sentence detection, the classifier's passes, redaction's look-behind after digits. Nothing here
is personal data, a credential or a harmful topic, so no redaction or block changes what a benchmark
measures. Written for the simulator; ASCII only, so every token decodes on its own.
"""

SENTENCES = (
    "Thanks for reaching out, I can help with that.",
    "Your order usually ships within 2 business days, and tracking appears as soon as the carrier scans it.",
    "If the package has not moved for 5 days, we can open a trace with the carrier for you.",
    "Returns are free within 30 days of delivery, as long as the item is unused and in its original box.",
    "To start a return, open your order history, choose the item, and select the reason that fits best.",
    "Refunds go back to the original payment method and normally take 3 to 7 days to appear.",
    "A steak should rest for about 5 minutes after grilling, so its juices settle back into the meat.",
    "Baking soda needs an acid to react, while baking powder already contains one.",
    "For crisp roast potatoes, parboil them for 8 minutes, rough up the edges, and roast them at 220 degrees.",
    "Water tomato plants deeply two or three times a week rather than a little every day.",
    "Compost needs a mix of green material, brown material, air and a little moisture.",
    "Here is a simple plan:",
    "1. Check the label on the box for the model number.",
    "2. Restart the device and wait about 30 seconds before you plug it back in.",
    "3. If the light is still red, hold the reset button for 10 seconds.",
    "Most people find that a short walk after lunch helps them stay focused in the afternoon.",
    "The museum opens at 9 in the morning and the last entry is an hour before closing.",
    "When you travel with a connecting flight, leave at least 90 minutes between arrival and departure.",
    "A good budget starts with what you actually spent last month, not with what you hope to spend.",
    "Is there anything else about your order I can help you with today?",
    "Spreadsheets can sum a column with one formula, and the same formula updates when you add rows.",
    "For a clean photo, wipe the lens, tap the screen to focus, and hold still for a moment.",
    "Our support team is available every day from 8 in the morning until 8 in the evening.",
    "Let me know if you would like me to walk you through any of these steps in more detail.",
)

-- Demo data for the `orders` tool (the connected-app example).
-- Loaded into SQLite by switchyard/libs/tools/orders.py; customers are keyed by (tenant, user).

CREATE TABLE IF NOT EXISTS customers (
  id INTEGER PRIMARY KEY,
  tenant TEXT NOT NULL,
  user_id TEXT NOT NULL,
  name TEXT NOT NULL,
  email TEXT NOT NULL,
  UNIQUE (tenant, user_id)
);

CREATE TABLE IF NOT EXISTS orders (
  id TEXT PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(id),
  placed_at TEXT NOT NULL,
  status TEXT NOT NULL,          -- placed | packed | shipped | out_for_delivery | delivered | cancelled | returned
  total_cents INTEGER NOT NULL,
  currency TEXT NOT NULL DEFAULT 'USD',
  carrier TEXT,
  tracking_number TEXT,
  estimated_delivery TEXT
);

CREATE TABLE IF NOT EXISTS order_items (
  id INTEGER PRIMARY KEY,
  order_id TEXT NOT NULL REFERENCES orders(id),
  sku TEXT NOT NULL,
  name TEXT NOT NULL,
  quantity INTEGER NOT NULL,
  unit_price_cents INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS delivery_events (
  id INTEGER PRIMARY KEY,
  order_id TEXT NOT NULL REFERENCES orders(id),
  at TEXT NOT NULL,
  location TEXT,
  description TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS idx_orders_customer ON orders(customer_id, placed_at);
CREATE INDEX IF NOT EXISTS idx_items_order ON order_items(order_id);
CREATE INDEX IF NOT EXISTS idx_events_order ON delivery_events(order_id, at);

INSERT INTO customers (id, tenant, user_id, name, email) VALUES
  (1, 'default', 'dev',   'Dev Example',   'dev@example.com'),
  (2, 'default', 'alice', 'Alice Martin',  'alice@example.com'),
  (3, 'acme',    'dev',   'Dev at Acme',   'dev@acme.example'),
  (4, 'acme',    'bob',   'Bob Stone',     'bob@acme.example');

INSERT INTO orders (id, customer_id, placed_at, status, total_cents, currency, carrier, tracking_number, estimated_delivery) VALUES
  ('A1001', 1, '2026-10-28T09:12:00Z', 'delivered',        8998, 'USD', 'UPS',   '1Z999AA10123456784', '2026-11-01'),
  ('A1002', 1, '2026-11-24T16:40:00Z', 'out_for_delivery', 4599, 'USD', 'FedEx', '7712 3456 7890',     '2026-12-02'),
  ('A1003', 1, '2026-11-30T11:05:00Z', 'packed',           12900, 'USD', NULL,   NULL,                 '2026-12-05'),
  ('A1004', 1, '2026-09-15T08:00:00Z', 'returned',         2499, 'USD', 'USPS',  '9400 1000 0000 0000 0001', '2026-09-19'),
  ('A2001', 2, '2026-11-20T10:00:00Z', 'shipped',          15999, 'USD', 'UPS',  '1Z999AA10987654321', '2026-11-26'),
  ('A2002', 2, '2026-11-29T13:30:00Z', 'placed',           999,  'USD', NULL,    NULL,                 '2026-12-06'),
  ('B3001', 3, '2026-11-18T07:45:00Z', 'delivered',        30000, 'EUR', 'DHL',  'JD014600003456789', '2026-11-22'),
  ('B4001', 4, '2026-11-27T19:20:00Z', 'shipped',          5400, 'EUR', 'DHL',   'JD014600009999999', '2026-12-03');

INSERT INTO order_items (order_id, sku, name, quantity, unit_price_cents) VALUES
  ('A1001', 'KTL-01', 'Electric kettle, 1.7 L',      1, 3999),
  ('A1001', 'MUG-04', 'Stoneware mug (set of 2)',    2, 2499),
  ('A1002', 'HDP-22', 'Wireless headphones',         1, 4599),
  ('A1003', 'CHR-09', 'Ergonomic desk chair',        1, 12900),
  ('A1004', 'LMP-02', 'Desk lamp',                   1, 2499),
  ('A2001', 'MON-27', '27-inch monitor',             1, 15999),
  ('A2002', 'CBL-01', 'USB-C cable',                 1, 999),
  ('B3001', 'ESP-10', 'Espresso machine',            1, 30000),
  ('B4001', 'KBD-61', 'Mechanical keyboard',         1, 5400);

INSERT INTO delivery_events (order_id, at, location, description) VALUES
  ('A1001', '2026-10-28T15:00:00Z', 'Columbus, OH',  'Label created'),
  ('A1001', '2026-10-29T09:30:00Z', 'Columbus, OH',  'Picked up by carrier'),
  ('A1001', '2026-10-31T06:10:00Z', 'Chicago, IL',   'Arrived at local facility'),
  ('A1001', '2026-11-01T14:22:00Z', 'Chicago, IL',   'Delivered, left at front door'),
  ('A1002', '2026-11-25T10:00:00Z', 'Memphis, TN',   'Label created'),
  ('A1002', '2026-11-26T18:45:00Z', 'Memphis, TN',   'Picked up by carrier'),
  ('A1002', '2026-11-29T03:12:00Z', 'Indianapolis, IN', 'Delayed: weather'),
  ('A1002', '2026-12-01T22:05:00Z', 'Chicago, IL',   'Arrived at local facility'),
  ('A1002', '2026-12-02T07:40:00Z', 'Chicago, IL',   'Out for delivery'),
  ('A1004', '2026-09-16T11:00:00Z', 'Reno, NV',      'Picked up by carrier'),
  ('A1004', '2026-09-19T16:30:00Z', 'Chicago, IL',   'Delivered'),
  ('A1004', '2026-09-25T12:00:00Z', 'Chicago, IL',   'Return received at warehouse'),
  ('A2001', '2026-11-21T09:00:00Z', 'Louisville, KY', 'Picked up by carrier'),
  ('A2001', '2026-11-23T17:00:00Z', 'Denver, CO',    'In transit'),
  ('B3001', '2026-11-19T08:00:00Z', 'Leipzig, DE',   'Picked up by carrier'),
  ('B3001', '2026-11-22T12:30:00Z', 'Berlin, DE',    'Delivered to neighbour'),
  ('B4001', '2026-11-28T08:00:00Z', 'Leipzig, DE',   'Picked up by carrier');

-- retryDelay holds a failed batch back only when the queue's configure named it (API.md, "does better" 8).
-- Queen stores retryDelay, default 1000, but redelivers a failed batch on the next pop, and its own pipeline
-- script depends on that: its poison messages must reach the DLQ before the good ones finish. Configure is a
-- full overwrite, so a later configure without retryDelay makes redelivery immediate again.
ALTER TABLE queen.queues ADD COLUMN retry_delay_explicit boolean NOT NULL DEFAULT false;

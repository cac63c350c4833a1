-- extend: the kit's (kit/extend.sql), on the slots (leases): no version
-- bump, who holds what does not change.
{{sql(kit/extend.sql)}}

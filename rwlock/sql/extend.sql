-- extend: the kit's (kit/extend.sql), on the holders (leases).
{{sql(kit/extend.sql)}}

SELECT * FROM {{acquire_fn}}($1::text, $2::text, $3::text, $4::boolean, $5::bigint, $6::bigint, $7::boolean, $8::text, $9::boolean)

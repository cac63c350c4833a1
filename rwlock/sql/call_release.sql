SELECT * FROM {{release_fn}}($1::text, $2::text, $3::boolean)

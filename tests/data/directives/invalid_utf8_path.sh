#!/bin/bash
#RSA_DATA_IN=/gpfs/café/in
#RSA_DATA_OUT=/gpfs/ÿþ
